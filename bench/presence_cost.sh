#!/usr/bin/env bash
# What the shim's and the free guard's mere presence costs a launch-bound program, no daemon, no
# window: plain, shim loaded (idle), shim + guard preloaded; interleaved, 5 rounds, step ms each.
# bench/presence_cost.sh [PROGRAM ARGS...]   (default: bench/workloads/cupy_fft.py --steps 20000)
set -uo pipefail
cd "$(dirname "$0")/.."
PROG=("$@"); [ ${#PROG[@]} -eq 0 ] && PROG=(bench/workloads/cupy_fft.py --steps 20000)
SHIM=$PWD/shim/build/libgitm_shim.so GUARD=$PWD/shim/build/libgitm_guard.so
DIR=$(mktemp -d)
for round in 1 2 3 4 5; do
  for arm in plain shim guard; do
    case $arm in
      plain) env=() ;;
      shim) env=(CUDA_INJECTION64_PATH=$SHIM GITM_JOB_DIR=$DIR) ;;
      guard) env=(CUDA_INJECTION64_PATH=$SHIM GITM_JOB_DIR=$DIR LD_PRELOAD=$GUARD) ;;
    esac
    ms=$(env "${env[@]}" python3 "${PROG[@]}" | sed -n 's/.*step_ms=\([0-9.]*\).*/\1/p')
    echo "$round $arm $ms"
  done
done
rm -rf "$DIR"
