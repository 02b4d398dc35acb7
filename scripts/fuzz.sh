#!/usr/bin/env bash
# Runs libFuzzer targets for SECONDS each, at most `nproc` at a time, each on a fresh copy of its
# committed seed corpus. Findings (crash-*, leak-*, timeout-*, oom-*) land in BUILD/fuzz-<target>/;
# the exit status is non-zero if any target found something.
#   scripts/fuzz.sh BUILD SECONDS TARGET...
set -uo pipefail
build=$1 seconds=$2
shift 2
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

corpus_of() {
  case $1 in
    fuzz_checkpoint) echo "$repo/tests/fuzz/corpus" ;;
    fuzz_load_forward) echo "$repo/tests/fuzz/corpus_load_forward" ;;
    *) echo "fuzz.sh: no corpus for target '$1'" >&2; exit 2 ;;
  esac
}

run_one() {
  local target=$1 dir="$build/fuzz-$1"
  rm -rf "$dir" && mkdir -p "$dir/corpus"
  cp "$(corpus_of "$target")"/* "$dir/corpus/"
  # Any single allocation over 64 MB counts as a finding (inputs are at most 64 KiB); the RSS
  # limit leaves room for ASan's quarantine.
  (cd "$dir" && "$build/tests/fuzz/$target" -max_len=65536 -max_total_time="$seconds" \
     -malloc_limit_mb=64 -rss_limit_mb=4096 -print_final_stats=1 corpus >"$dir/log.txt" 2>&1)
  local rc=$?
  local execs
  execs=$(grep -a "stat::number_of_executed_units" "$dir/log.txt" | awk '{print $2}')
  echo "$target: exit $rc, ${seconds}s, ${execs:-?} executions, corpus $(ls "$dir/corpus" | wc -l) files," \
       "findings: $(ls "$dir" | grep -cE '^(crash|leak|timeout|oom|slow-unit)-')"
  return $rc
}

jobs=$(nproc)
pids=() status=0
for t in "$@"; do
  run_one "$t" &
  pids+=($!)
  if (( ${#pids[@]} >= jobs )); then wait "${pids[0]}" || status=1; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
