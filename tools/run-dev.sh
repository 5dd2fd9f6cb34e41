#!/usr/bin/env bash
# `make run`: start gitmd on the embedded default (state and socket under ./var/), show it working
# with the real CLI, then keep it serving in the foreground until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
export GITMD_SOCKET="$PWD/var/run/gitmd.sock"
CTL=.venv/bin/gitmctl

.venv/bin/gitmd --prefix var --config tools/dev.toml "$@" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true; wait $pid || true; exit 0' INT TERM

for _ in $(seq 1 100); do
  if ! kill -0 $pid 2>/dev/null; then
    wait $pid || true
    echo "gitmd failed to start (see above)" >&2
    exit 1
  fi
  $CTL status >/dev/null 2>&1 && break
  sleep 0.2
done

step() { printf '\n\033[1m$ gitmctl %s\033[0m\n' "$*"; $CTL "$@"; }
step status
step gpus
sleep 2
step telemetry
step telemetry --gpu 0 --since 5s
cat <<MSG

gitmd is serving (pid $pid) on $GITMD_SOCKET; metrics at http://127.0.0.1:9402/metrics
In another shell:  export GITMD_SOCKET=$GITMD_SOCKET
                   .venv/bin/gitmctl telemetry --watch
Ctrl-C stops it.
MSG
wait $pid
