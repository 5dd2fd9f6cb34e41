"""Ring decode rate: the daemon's vectorised drain + decode against a naive per-record loop, in
the same run, on the same ring written by the C ring code (shim/build/ring_writer).

The daemon maps a ring once and drains it window after window, so the steady state is a warm
mapping: each repeat restores the ring's records and head (as the producer would have written
them) and times drain + decode. The first, cold pass (page faults on the mapping and on fresh
buffers) is reported on its own.

    python bench/decode_rate.py --records 2000000 --repeats 5
Target: at least 5 M records/s for the vectorised path on the 2-core CI machine class.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gitmd.capture.decode import NameTable, drain_decode  # noqa: E402
from gitmd.capture.ring import Ring  # noqa: E402

WRITER = ROOT / "shim" / "build" / "ring_writer"
_COMMON = struct.Struct("<QBBHIQQ")
_KERNEL = struct.Struct("<IIIHHHHHHII")


def naive(path: Path) -> int:
    """What a per-record Python loop costs: read each slot, check seq, unpack by type."""
    data = path.read_bytes()
    head, tail = struct.unpack_from("<Q", data, 64)[0], struct.unpack_from("<Q", data, 128)[0]
    cap = struct.unpack_from("<Q", data, 16)[0]
    off = struct.unpack_from("<Q", data, 24)[0]
    n = 0
    for pos in range(tail, head):
        base = off + (pos & (cap - 1)) * 64
        seq, rtype, _flags, _dev, _corr, _start, _end = _COMMON.unpack_from(data, base)
        if seq != pos + 1:
            break
        if rtype == 1:
            _KERNEL.unpack_from(data, base + 32)
        n += 1
    return n


def fresh_ring(records: int, capacity: int, tmp: Path) -> Path:
    d = Path(tempfile.mkdtemp(dir=tmp))
    out = subprocess.run(
        [str(WRITER), str(d), str(records), str(capacity), "2"], capture_output=True, text=True, check=True
    )
    return Path(out.stdout.strip())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if not WRITER.exists():
        subprocess.run(["make", "-C", str(ROOT / "shim"), "tests"], check=True, capture_output=True)
    capacity = 1 << max(6, (args.records + 64).bit_length())
    tmp = Path(tempfile.mkdtemp(prefix="gitmd-decode-"))
    fast, slow = [], []
    try:
        path = fresh_ring(args.records, capacity, tmp)
        ring = Ring(path)
        snapshot = ring.read_rows(0, ring.capacity)
        head = int(ring.hdr["head"])
        t0 = time.perf_counter()
        cold_n = drain_decode(ring, NameTable()).count
        cold = cold_n / (time.perf_counter() - t0)
        for _ in range(args.repeats):  # interleaved: vectorised, then naive, on the same ring contents
            ring.write_rows(0, snapshot)
            ring.hdr["tail"] = 0
            ring.hdr["head"] = head
            t0 = time.perf_counter()
            d = drain_decode(ring, NameTable())
            fast.append(d.count / (time.perf_counter() - t0))
            assert d.count == args.records, d.count
            ring.write_rows(0, snapshot)
            ring.hdr["tail"] = 0
            t0 = time.perf_counter()
            n = naive(path)
            slow.append(n / (time.perf_counter() - t0))
        ring.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    f, s = statistics.median(fast), statistics.median(slow)
    print(f"decode of {args.records:,} records, median of {args.repeats} interleaved repeats")
    print("| path | records/s | ratio |")
    print("| --- | --- | --- |")
    print(f"| vectorised drain + decode | {f / 1e6:.1f} M | {f / s:.0f}x |")
    print(f"| naive per-record loop | {s / 1e6:.2f} M | 1x |")
    print(f"| vectorised, first (cold) pass | {cold / 1e6:.1f} M | {cold / s:.0f}x |")
    print(f"target >= 5 M records/s: {'met' if f >= 5e6 else 'NOT met'}")
    if args.json:
        args.json.write_text(
            json.dumps({"vectorised_per_s": f, "naive_per_s": s, "cold_per_s": cold, "records": args.records})
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
