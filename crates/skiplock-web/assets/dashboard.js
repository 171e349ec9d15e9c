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
      if (fresh && live) {
        // Ticked jobs stay ticked across a refresh.
        var ticked = {};
        live.querySelectorAll("input[name=id]:checked").forEach(function (box) {
          ticked[box.value] = true;
        });
        fresh.querySelectorAll("input[name=id]").forEach(function (box) {
          if (ticked[box.value]) { box.checked = true; }
        });
        live.replaceWith(fresh);
      }
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
    var by = ev.submitter;
    var msg = (by && by.getAttribute("data-confirm")) || ev.target.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) { ev.preventDefault(); }
  });

  // The job list's "tick every job of this page" box.
  document.addEventListener("change", function (ev) {
    if (ev.target.id !== "pick-all") { return; }
    document.querySelectorAll("#live input[name=id]").forEach(function (box) {
      box.checked = ev.target.checked;
    });
  });
})();
