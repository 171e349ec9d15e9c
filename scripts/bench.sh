#!/usr/bin/env bash
# Runs the whole benchmark suite on a throwaway PostgreSQL cluster and rewrites
# docs/BENCHMARKS.md with the figures (a "## Notes" section at its end is kept). Every run's
# figures, one JSON object per line in the order they ran, go to target/bench/points.jsonl.
#
#   scripts/bench.sh            # the full suite (about 40 minutes on 2 cores; `bench all`
#                               # says how long each part takes before it starts)
#   scripts/bench.sh --quick    # tiny sizes, to check that everything runs
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release -q -p skiplock-cli
# The peer of `bench peers` (graphile_worker), a binary of its own beside `skiplock`.
cargo build --release -q -p skiplock-bench --features peers --bin skiplock-peer-graphile
bin=target/release/skiplock
home="$(mktemp -d)"
export SKIPLOCK_HOME="$home"
trap '"$bin" pg stop >/dev/null 2>&1 || true; rm -rf "$home"' EXIT
url="$("$bin" pg url)"

out=docs/BENCHMARKS.md
notes=""
if [[ -f "$out" ]] && grep -q '^## Notes' "$out"; then
  notes="$(sed -n '/^## Notes/,$p' "$out")"
fi
mkdir -p target/bench
"$bin" --database-url "$url" bench all --markdown --points target/bench/points.jsonl "$@" > "$out.new"
if [[ -n "$notes" ]]; then
  printf '\n%s\n' "$notes" >> "$out.new"
fi
mv "$out.new" "$out"
echo "wrote $out (every run's figures: target/bench/points.jsonl)"
