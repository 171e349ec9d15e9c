// skiplock dashboard: refresh the live part of the page every few seconds while the tab is
// visible, and ask before actions marked data-confirm. No build step, no dependencies.
(function () {
  "use strict";
  var every = Number(document.body.getAttribute("data-refresh")) || 0;
  var status = document.getElementById("refresh-status");
  var busy = false;

  function say(text) { if (status) { status.textContent = text; } }

  function tick() {
    if (busy || document.visibilityState !== "visible") { return; }
    busy = true;
    fetch(window.location.href, {
      credentials: "same-origin",
      cache: "no-store",
      headers: { "X-Skiplock-Refresh": "1" }
    }).then(function (res) {
      if (!res.ok) { throw new Error("HTTP " + res.status); }
      return res.text();
    }).then(function (text) {
      var fresh = new DOMParser().parseFromString(text, "text/html").getElementById("live");
      var live = document.getElementById("live");
      if (fresh && live) { live.replaceWith(fresh); }
      say("updated " + new Date().toLocaleTimeString());
    }).catch(function (e) {
      say("refresh failed (" + e.message + ")");
    }).finally(function () { busy = false; });
  }

  if (every > 0) {
    window.setInterval(tick, every);
    document.addEventListener("visibilitychange", function () {
      if (document.visibilityState === "visible") { tick(); } else { say("paused"); }
    });
  }

  document.addEventListener("submit", function (ev) {
    var msg = ev.target.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) { ev.preventDefault(); }
  });
})();
