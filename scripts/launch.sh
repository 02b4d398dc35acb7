#!/usr/bin/env bash
# Starts N processes of one data-parallel job on this machine, as torchrun does: each gets RANK,
# WORLD_SIZE, MASTER_ADDR=127.0.0.1 and MASTER_PORT (default 29500, or $MASTER_PORT). Rank 0's
# output passes through; the others' goes to stderr prefixed with their rank. Exits with the first
# non-zero status (a failed rank makes the others stop with an error on their own; whatever still
# runs 10 s later is killed).
#   scripts/launch.sh 2 build/examples/cnn_qat --distributed --mode qat --epochs 3
# Several machines: start the program on each with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT
# set by hand, or under mpirun (-x MASTER_ADDR=host0).
set -uo pipefail
if [ $# -lt 2 ] || ! [[ "$1" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: launch.sh N PROGRAM [ARGS...]   (N >= 1 processes)" >&2
  exit 2
fi
n=$1
shift
export WORLD_SIZE=$n MASTER_ADDR=${MASTER_ADDR:-127.0.0.1} MASTER_PORT=${MASTER_PORT:-29500}
# Each rank is bound to its own share of the cores this script may use (as mpirun's
# --bind-to core): with C cores and N <= C ranks, rank r gets cores r*C/N .. (r+1)*C/N - 1;
# QAT_BIND=0 leaves them free to move, and N > C never binds. Bound ranks also let the group's
# synchronous lane spin instead of sleeping (GroupOptions::Lane::Auto). Measured on a 2-core VM,
# 2 ranks x 1 thread, CNN epoch against one process (bench/dist_scaling.sh): fp32 0.52x bound,
# 0.52x free; QAT 0.55x bound, 0.57x free.
cores=()
for part in $(sed -n 's/^Cpus_allowed_list:\s*//p' /proc/self/status | tr ',' ' '); do
  if [[ "$part" == *-* ]]; then for ((c = ${part%-*}; c <= ${part#*-}; c++)); do cores+=("$c"); done
  else cores+=("$part"); fi
done
bind() {  # bind RANK -> the taskset prefix for that rank, or nothing
  local c=${#cores[@]}
  [ "${QAT_BIND:-1}" = 1 ] && [ "$n" -le "$c" ] && command -v taskset >/dev/null || return 0
  local lo=$(($1 * c / n)) hi=$((($1 + 1) * c / n - 1)) list=() k
  for ((k = lo; k <= hi; k++)); do list+=("${cores[$k]}"); done
  echo taskset -c "$(IFS=,; echo "${list[*]}")"
}
pids=()
for ((r = 0; r < n; r++)); do
  # shellcheck disable=SC2046  # the prefix is words on purpose
  if [ "$r" -eq 0 ]; then
    RANK=0 $(bind 0) "$@" &
  else
    RANK=$r $(bind "$r") "$@" > >(sed "s/^/[rank $r] /" >&2) 2>&1 &
  fi
  pids+=($!)
done
status=0
left=$n
declare -A done_
while [ "$left" -gt 0 ]; do
  for i in "${!pids[@]}"; do
    [ -n "${done_[$i]:-}" ] && continue
    if ! kill -0 "${pids[$i]}" 2>/dev/null; then
      wait "${pids[$i]}"
      s=$?
      done_[$i]=1
      left=$((left - 1))
      if [ "$s" -ne 0 ] && [ "$status" -eq 0 ]; then
        status=$s
        deadline=$((SECONDS + 10))
      fi
    fi
  done
  if [ "$status" -ne 0 ] && [ "$SECONDS" -ge "${deadline:-0}" ] && [ "$left" -gt 0 ]; then
    for i in "${!pids[@]}"; do [ -z "${done_[$i]:-}" ] && kill -9 "${pids[$i]}" 2>/dev/null; done
  fi
  sleep 0.1
done
exit "$status"
