#!/usr/bin/env bash
# Counts the instructions the worker spends per job: `skiplock work --drain` on no-op jobs
# under valgrind's callgrind, on a throwaway PostgreSQL cluster. Instructions, not seconds:
# the count repeats within a few per cent from run to run whatever else the machine does,
# so a change to the worker's CPU per job shows here where timings drift. `work` runs with
# its default log, as users run it.
#
#   scripts/instructions-per-job.sh [BINARY]   # default target/release/skiplock
#
# JOBS (default 20000) and CONCURRENCY (default 200) set the drain. Prints the total, the
# jobs done and the instructions per job (start-up included, a few hundred per job at
# 20,000 jobs). Needs valgrind.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v valgrind >/dev/null || { echo "error: valgrind is not installed" >&2; exit 1; }
jobs="${JOBS:-20000}"
concurrency="${CONCURRENCY:-200}"
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "error: JOBS must be a positive number" >&2; exit 1; }
[[ "$concurrency" =~ ^[1-9][0-9]*$ ]] || { echo "error: CONCURRENCY must be a positive number" >&2; exit 1; }
bin="${1:-}"
if [[ -z "$bin" ]]; then
  cargo build --release -q -p skiplock-cli
  bin=target/release/skiplock
fi
[[ -x "$bin" ]] || { echo "error: $bin is not an executable" >&2; exit 1; }

home="$(mktemp -d)"
export SKIPLOCK_HOME="$home"
trap '"$bin" pg stop >/dev/null 2>&1 || true; rm -rf "$home"' EXIT
url="$("$bin" pg url)"
export DATABASE_URL="$url"
schema=instructions
"$bin" --schema "$schema" migrate >/dev/null
awk -v n="$jobs" 'BEGIN { for (i = 0; i < n; i++) print "{}" }' | "$bin" --schema "$schema" enqueue --queue bench --kind noop >/dev/null

log="$home/callgrind.log"
summary="$(env -u RUST_LOG valgrind --tool=callgrind --callgrind-out-file="$home/callgrind.out" \
  "$bin" --schema "$schema" work --queue "bench=$concurrency" --drain --json 2>"$log")"
total="$(grep -o 'Collected : [0-9]*' "$log" | awk '{print $3}')"
done_jobs="$(grep -o '"done":[0-9]*' <<<"$summary" | tail -1 | cut -d: -f2)"
if [[ -z "$total" || "${done_jobs:-0}" -eq 0 ]]; then
  echo "error: the drain did not finish; valgrind's output follows" >&2
  cat "$log" >&2
  exit 1
fi
echo "instructions: $total, jobs done: $done_jobs, per job: $((total / done_jobs))"
