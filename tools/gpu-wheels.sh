#!/usr/bin/env bash
# Download, here (where the package index is reachable), the wheels the GPU host lacks into .whl/
# (ignored by git; name it in the device tool's `carry`). tests/gpu/run.sh installs them there with
# `pip install --no-index --no-deps --target`. Versions come from constraints.txt so the generated
# protobuf code matches the protobuf and grpcio runtime it will meet.
set -euo pipefail
cd "$(dirname "$0")/.."
PYVER=${GPU_PYTHON_VERSION:-3.12}
NEEDED=(grpcio protobuf grpcio-health-checking grpcio-reflection apscheduler tzlocal sqlite-utils sqlite-fts4
        click-default-group cffi pycparser
        filecheck)  # not gitmd's: the corpus's numba-cuda program imports numba.cuda.testing, which needs it
# The fleet's GPU test only (tests/gpu/test_fleet.py), in a folder of their own: pgserver alone is
# ~40 MiB, and with it the corpus's carry (.whl, .whl-numba, the materialised sources) passed the
# device tool's 64 MiB. Carry .whl-fleet only for GPU_TESTS_K=fleet.
FLEET=(psycopg psycopg-binary  # the fleet library's client
       pgserver)  # not gitmd's: only the PostgreSQL server it bundles (bench/pgserver.py)
download() {  # DEST NAME...
  local dest=$1; shift
  rm -rf "$dest" && mkdir -p "$dest"
  local specs=() name pin
  for name in "$@"; do
    pin=$(grep -i "^${name}==" constraints.txt || true)
    specs+=("${pin:-$name}")
  done
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$dest" "${specs[@]}"
  ls "$dest"
  du -sh "$dest"
}
download .whl "${NEEDED[@]}"
download .whl-fleet "${FLEET[@]}"
# A numpy that numba-cuda 0.30.4 supports, for the corpus's numba-cuda program only: the GPU host's
# numpy 2.5.2 has no np.row_stack, and numba-cuda compiled no kernel against it (H200, 2026-12-03).
# tests/gpu/run.sh installs it into /tmp/site-numba, which that program's manifest entry puts first
# on its PYTHONPATH; nothing else sees it.
rm -rf .whl-numba && mkdir -p .whl-numba
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl-numba "numpy==2.2.6"
du -sh .whl-numba
