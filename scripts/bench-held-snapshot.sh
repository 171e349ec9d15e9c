#!/usr/bin/env bash
# Runs the held-snapshot scenario (not part of scripts/bench.sh) on a throwaway PostgreSQL
# cluster and rewrites docs/HELD-SNAPSHOT.md and its plot, docs/held-snapshot.svg (a
# "## Notes" section at the end of the Markdown is kept).
#
#   scripts/bench-held-snapshot.sh                  # 30 minutes held at 1,000 jobs/s: about 40
#                                                   # minutes, longer where enqueues fall behind
#   scripts/bench-held-snapshot.sh --quick          # seconds, to check that it runs
#   scripts/bench-held-snapshot.sh --rate 2000 --duration 10m
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release -q -p skiplock-cli
bin=target/release/skiplock
home="$(mktemp -d)"
export SKIPLOCK_HOME="$home"
trap '"$bin" pg stop >/dev/null 2>&1 || true; rm -rf "$home"' EXIT
url="$("$bin" pg url)"

out=docs/HELD-SNAPSHOT.md
notes=""
if [[ -f "$out" ]] && grep -q '^## Notes' "$out"; then
  notes="$(sed -n '/^## Notes/,$p' "$out")"
fi
"$bin" --database-url "$url" bench held-snapshot --markdown --plot docs/held-snapshot.svg "$@" > "$out.new"
if [[ -n "$notes" ]]; then
  printf '\n%s\n' "$notes" >> "$out.new"
fi
mv "$out.new" "$out"
echo "wrote $out and docs/held-snapshot.svg"
