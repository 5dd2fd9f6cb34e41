#!/usr/bin/env bash
# Everything that must run on the GPU host, in one call (device time is scarce):
#   tests/gpu/run.sh OUTDIR [PART ...]      PART: tests, cupti-residual, clock-spread, run-cost, shim-overhead, shim-floor, window-stress, crash-soak, corpus, corpus-verify, telemetry-cost, capture-set,
#                                                 register-rate, scoreboard (BENCH_WORKLOADS=a,b,
#                                                 BENCH_ARGS=--no-oracle)
# A scoreboard part too long for one call (fp32_mlp with its 600-step runs and delivered pairs, 2026-12-03): run
# BENCH_ARGS=--oracle-only first, commit OUT/<workload>-oracle.json under bench/results/, then
# BENCH_ARGS="--oracle-from bench/results/<dir> --no-overhead" in the next call.
#   (default: the first three)
# The tests part no longer fits one call's 10 minutes (H200, 2026-12-02: stream priority + tune
# 383 s, launch trials + capture 259 s, before experiments and telemetry): run it in pieces, e.g.
# GPU_TESTS_K="capture or telemetry or stream" then GPU_TESTS_K="tune or launch" then "experiments".
# -k matches module names too: "backoff" selects all of test_consent_and_backoff.py (consent, backoff and
# the window budget: with launch_trial they ran past 530 s, H200 2026-12-04). "test_capture or window_budget
# or blocking_sync" took 303 s. Each test's time is in the log (--durations=0).
# The fleet's test (GPU_TESTS_K=fleet, about 4 minutes: a tune, then two runs) needs PostgreSQL: the
# GPU host has none, the carried .whl-fleet/ brings the pgserver wheel's server and psycopg.
# GPU_TESTS_K=nccl: DDP over NCCL, one rank per GPU (tests/gpu/test_ranks_nccl.py); it needs two GPUs
# (the device tool's nvidia-h200-x2) and skips on one. Not run yet (2026-12-04).
# GPU_TESTS_K=cpu_affinity with GITM_SHIM_DEBUG=1: the shim's own lines land in OUTDIR/job-contended.log.
# Installs the carried wheels (.whl/, from `make gpu-wheels`) into /tmp/site, uses the carried
# generated protobuf code (gitmd/api/_generated), runs the parts, writes full logs to OUTDIR and
# prints a short table last. Never changes the card's settings.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUTDIR=${1:?usage: tests/gpu/run.sh OUTDIR [PART ...]}
shift
PARTS=("$@")
[ ${#PARTS[@]} -eq 0 ] && PARTS=(tests shim-overhead telemetry-cost)
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1

# The device tool brings back at most 8 files of 16 MiB (64 MiB in all), 2 folders deep (device/README.md):
# a corpus call's raw JSONs and window archives did not come back (2026-12-06). So on any exit (a limit's
# SIGTERM included) everything but the tables (*.md) and host.txt goes into OUTDIR/raw.tgz, cut into
# 15-MiB parts raw.tgz.part-aa, -ab... where larger (cat them back together); with more than five tables
# they go in too. Unpack with `tar xzf raw.tgz` beside the tables.
pack() {
  trap - EXIT TERM INT
  cd "$OUTDIR" || return
  local tables=() rest=()
  mapfile -t tables < <(find . -maxdepth 1 -type f \( -name '*.md' -o -name host.txt \) -printf '%P\n' | sort)
  [ ${#tables[@]} -gt 6 ] && tables=(host.txt)
  mapfile -t rest < <(find . -mindepth 1 -maxdepth 1 -printf '%P\n' | grep -vxF -f <(printf '%s\n' "${tables[@]}" raw.tgz) | sort)
  [ ${#rest[@]} -eq 0 ] && return
  tar czf raw.tgz -- "${rest[@]}" && rm -rf -- "${rest[@]}"
  if [ "$(stat -c %s raw.tgz)" -gt $((15 * 1024 * 1024)) ]; then
    split -b 15M raw.tgz raw.tgz.part- && rm -f raw.tgz
  fi
  echo "packed into $OUTDIR: $(ls | tr '\n' ' ')"
}
OUTDIR=$(cd "$OUTDIR" && pwd)
trap pack EXIT
trap 'exit 143' TERM INT

if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    > "$OUTDIR/pip.log" 2>&1 || { cat "$OUTDIR/pip.log"; exit 1; }
fi
if [ -d .whl-fleet ]; then  # the fleet's test only: psycopg and pgserver's PostgreSQL
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl-fleet/*.whl \
    >> "$OUTDIR/pip.log" 2>&1 || { cat "$OUTDIR/pip.log"; exit 1; }
fi
if [ -d .whl-numba ]; then  # the corpus's numba-cuda program only (its manifest entry's PYTHONPATH)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-numba \
    .whl-numba/*.whl >> "$OUTDIR/pip.log" 2>&1 || { cat "$OUTDIR/pip.log"; exit 1; }
fi
export PYTHONPATH=/tmp/site:$PWD
[ -f gitmd/api/_generated/gitm/v1/gitmd_pb2.py ] || { echo "carry gitmd/api/_generated (make proto)"; exit 1; }

{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv,noheader
  python3 -c 'import sys, torch, pynvml, grpc, google.protobuf as p; print("python", sys.version.split()[0], "torch", torch.__version__, "grpcio", grpc.__version__, "protobuf", p.__version__)'
  nproc
} > "$OUTDIR/host.txt" 2>&1
cat "$OUTDIR/host.txt"
make -C shim all > "$OUTDIR/shim-build.log" 2>&1 || { cat "$OUTDIR/shim-build.log"; exit 1; }
tail -1 "$OUTDIR/shim-build.log"

corpus_src() {  # the materialised sources must be carried; the synthetic data is written here (47 MiB: not carried)
  compgen -G 'bench/corpus/src/*+*' > /dev/null || { echo "carry bench/corpus/src/<owner>+<name> (make corpus)"; exit 1; }
  python3 bench/corpus/data.py > "$OUTDIR/corpus-data.log" 2>&1 || { cat "$OUTDIR/corpus-data.log"; exit 1; }  # idempotent
}

declare -A RESULT
for part in "${PARTS[@]}"; do
  case "$part" in
    tests)
      GITMD_GPU_OUT="$OUTDIR" python3 -m pytest -q -p no:cacheprovider -rs --durations=0 ${GPU_TESTS_K:+-k "$GPU_TESTS_K"} tests/gpu \
        2>&1 | tee "$OUTDIR/pytest-gpu.log"
      RESULT[$part]=$(tail -1 "$OUTDIR/pytest-gpu.log")
      ;;
    shim-overhead)  # the issue asks for the median of at least 5 repeats
      python3 bench/shim_overhead.py --repeats 6 --json "$OUTDIR/shim-overhead.json" 2>&1 | tee "$OUTDIR/shim-overhead.md"
      RESULT[$part]=$(grep -E '^\| (launch|train)' "$OUTDIR/shim-overhead.md" | tr '\n' ' ' || echo "failed")
      ;;
    window-stress)  # windows cycled fast on a four-thread launch loop, shim modes side by side (no daemon)
      command -v gdb > "$OUTDIR/gdb.txt" 2>&1
      python3 bench/window_stress.py --runs "${STRESS_RUNS:-4}" --modes "${STRESS_MODES:-detach,disable,detach-noguard,detach-kernel}" \
        --budget-s "${STRESS_BUDGET_S:-400}" ${STRESS_GDB:+--gdb} ${STRESS_ARGS:-} --json "$OUTDIR/window-stress.json" 2>&1 | tee "$OUTDIR/window-stress.md"
      RESULT[$part]=$(grep -E '^\| (detach|disable)' "$OUTDIR/window-stress.md" | tr '\n' ' ' || echo "failed")
      ;;
    shim-floor)  # CUPTI alone against the shim's open window, launch-bound, kernel activity only
      python3 bench/shim_overhead.py --repeats 8 --kinds plain,detach,floor --workloads launch --window-kinds kernel \
        --json "$OUTDIR/shim-floor.json" 2>&1 | tee "$OUTDIR/shim-floor.md"
      RESULT[$part]=$(grep -E 'within each process' "$OUTDIR/shim-floor.md" | tr '\n' ' ' || echo "failed")
      ;;
    cupti-residual)  # what each kind of CUPTI collection leaves behind once switched off, in-process ratios
      python3 bench/cupti_residual.py --repeats "${RESIDUAL_REPEATS:-3}" --budget-s "${RESIDUAL_BUDGET_S:-360}" \
        ${RESIDUAL_MODES:+--modes "$RESIDUAL_MODES"} --json "$OUTDIR/cupti-residual.json" 2>&1 | tee "$OUTDIR/cupti-residual.md"
      RESULT[$part]=$(grep -cE '^\| (plain|none|ckernel|kernel|runtime|driver|copies|launchcb|shim)' "$OUTDIR/cupti-residual.md" || echo "failed")
      ;;
    run-cost)  # what gitmd costs a short run, piece by piece (guard, CUPTI, shim, gitmctl, windows/trials)
      python3 bench/run_cost.py --programs "${RUNCOST_PROGRAMS:-cupy_fft,launch_bound}" --rounds "${RUNCOST_ROUNDS:-6}" ${RUNCOST_ARGS:-} \
        --json "$OUTDIR/run-cost.json" 2>&1 | tee "$OUTDIR/run-cost.md"
      RESULT[$part]=$(grep -E '^\| (cupy|launch|mlp|trivial|corpus)' "$OUTDIR/run-cost.md" | tr '\n' ' ' || echo "failed")
      ;;
    telemetry-cost)
      python3 bench/telemetry_cost.py --backends nvml,sim --duration 60 --json "$OUTDIR/telemetry-cost.json" \
        2>&1 | tee "$OUTDIR/telemetry-cost.md"
      RESULT[$part]=$(grep '^| nvml' "$OUTDIR/telemetry-cost.md" || echo "failed")
      ;;
    capture-set)
      python3 bench/capture_set.py "$OUTDIR/captures" ${CAPTURE_SET_ARGS:-} 2>&1 | tee "$OUTDIR/capture-set.log"
      RESULT[$part]="$(ls "$OUTDIR"/captures/*.npz 2>/dev/null | wc -l) capture files"
      ;;
    crash-soak)  # unmodified programs (corpus + in-house) through gitmctl run, fresh libraries, vs plain runs
      corpus_src
      python3 bench/crash_soak.py --programs "${SOAK_PROGRAMS:-timm-resnet18-train-fp32,timm-resnet18-train-bf16,timm-vit-small-infer,cupy-monte-carlo,threads4,dataloader}" \
        --rounds "${SOAK_ROUNDS:-20}" --runs "${SOAK_RUNS:-4}" --fresh-every "${SOAK_FRESH_EVERY:-2}" \
        --budget-s "${SOAK_BUDGET_S:-420}" ${SOAK_ARGS:-} --json "$OUTDIR/crash-soak.json" --logs "$OUTDIR/soak-logs" \
        2>&1 | tee "$OUTDIR/crash-soak.md"
      RESULT[$part]=$(grep -E '^\| [a-z]' "$OUTDIR/crash-soak.md" | head -8 | tr '\n' ' ' || echo "failed")
      ;;
    corpus)  # the corpus scoreboard (bench/corpus/scoreboard.py): CORPUS_PROGRAMS=a,b, CORPUS_RUNS, CORPUS_ORACLE,
      # (an oracle in parts: CORPUS_RUNS=0 CORPUS_ORACLE=a,b; a default oracle of a 17-s program took more
      # than 570 s on the H200, 2026-12-05),
      # CORPUS_BUDGET_S (no program is started once it is spent), GITMD_COMMIT (the commit measured: the
      # GPU host's copy of the tree keeps the session's first commit in .git; pass `git rev-parse` from here),
      # CORPUS_SHARED=1 (one library for all of CORPUS_PROGRAMS, their runs interleaved: e.g. the six timm
      # benchmark.py programs, CORPUS_ORACLE=none, to see whether one's launch is taken for another's)
      corpus_src
      python3 bench/corpus/scoreboard.py --programs "${CORPUS_PROGRAMS:?CORPUS_PROGRAMS=a,b}" --runs "${CORPUS_RUNS:-5}" \
        ${CORPUS_BUDGET_S:+--budget-s "$CORPUS_BUDGET_S"} ${CORPUS_SHARED:+--shared-library} \
        --oracle-levers "${CORPUS_ORACLE:-}" --out "$OUTDIR/corpus" 2>&1 | tee "$OUTDIR/corpus.md"
      RESULT[$part]=$(grep -E '^\| [a-z]' "$OUTDIR/corpus.md" | tr '\n' ' ' || echo "failed")
      ;;
    clock-spread)  # the launcher's clock against the clock library's (CUDA start to exit) and the program's own, and
      # what the library costs, on corpus programs (bench/clock_spread.py): CLOCK_PROGRAMS=a,b, CLOCK_RUNS, CLOCK_BUDGET_S
      corpus_src
      python3 bench/clock_spread.py --programs "${CLOCK_PROGRAMS:-timm-mobilenetv3-infer-b1}" --runs "${CLOCK_RUNS:-8}" \
        --budget-s "${CLOCK_BUDGET_S:-300}" --json "$OUTDIR/clock-spread.json" 2>&1 | tee "$OUTDIR/clock-spread.md"
      RESULT[$part]=$(grep -E 'CUDA part' "$OUTDIR/clock-spread.md" | tr '\n' ' ' || echo "failed")
      ;;
    corpus-verify)  # corpus programs run plainly once each (bench/corpus/verify.py): CORPUS_PROGRAMS=a,b (default all)
      corpus_src
      python3 bench/corpus/verify.py --programs "${CORPUS_PROGRAMS:-}" --repeats "${VERIFY_REPEATS:-1}" \
        --json "$OUTDIR/corpus-verify.json" 2>&1 | tee "$OUTDIR/corpus-verify.md"
      RESULT[$part]=$(grep -cE '^\| [a-z].* \| 0 \|' "$OUTDIR/corpus-verify.md")" ran with exit 0"
      ;;
    register-rate)
      python3 bench/register_rate.py --workloads 10000 --clients 8 --seconds 30 --json "$OUTDIR/register-rate.json" \
        2>&1 | tee "$OUTDIR/register-rate.md"
      RESULT[$part]=$(grep -E 'burst' "$OUTDIR/register-rate.md" | tr '\n' ' ' || echo "failed")
      ;;
    scoreboard)
      python3 bench/run.py --workloads "${BENCH_WORKLOADS:-}" --oracle-repeats "${ORACLE_REPEATS:-3}" ${BENCH_ARGS:-} --out "$OUTDIR" \
        2>&1 | tee "$OUTDIR/scoreboard.log"
      RESULT[$part]=$(grep -c '^| [a-z]' "$OUTDIR"/*-h200.md 2>/dev/null | tail -1)" rows"
      ;;
    *) echo "unknown part $part"; RESULT[$part]="unknown part" ;;
  esac
done

echo
echo "== summary =="
for part in "${PARTS[@]}"; do
  printf '%-16s %s\n' "$part" "${RESULT[$part]}"
done
