"""gitmd's own cost while it samples: CPU (% of one core) and RSS, for several backends side by side.

Starts one gitmd per backend at the same time (same interval, metrics on), lets them warm up, then
measures each process's CPU time (utime+stime from /proc) over the same wall-clock window, and its
RSS and peak RSS. Prints a markdown table and writes JSON when asked.

    python bench/telemetry_cost.py --backends nvml,sim --duration 60 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.harness import Gitmd  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15)


def status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def smaps_rollup(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, value = line.split(":", 1)
        out[key] = int(value.split()[0])  # kB
    return out


def top_mappings(pid: int, n: int = 6) -> list[tuple[str, int]]:
    """The mappings holding most resident memory: where the RSS is."""
    sizes: dict[str, int] = {}
    name = "?"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        parts = line.split()
        if "-" in parts[0] and len(parts) >= 5 and ":" not in parts[0]:
            name = parts[5] if len(parts) > 5 else "[anon]"
        elif parts[0] == "Rss:":
            sizes[name] = sizes.get(name, 0) + int(parts[1])
    return sorted(sizes.items(), key=lambda kv: -kv[1])[:n]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="sim", help="comma-separated: nvml, rocm, sim")
    ap.add_argument("--duration", type=float, default=60.0, help="measured window, seconds")
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--interval", type=float, default=1.0, help="sampling interval, seconds")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="gitmd-cost-"))
    daemons = {
        backend: Gitmd(
            tmp / backend,
            f'[telemetry]\nbackend = "{backend}"\ninterval_s = {args.interval}\n'
            f"[metrics]\nport = {19500 + i}\n",
        )
        for i, backend in enumerate(args.backends.split(","))
    }
    try:
        for d in daemons.values():
            d.start()
        procs = {b: d.proc for b, d in daemons.items() if d.proc is not None}
        time.sleep(args.warmup)
        t0 = time.monotonic()
        c0 = {b: cpu_s(p.pid) for b, p in procs.items()}
        time.sleep(args.duration)
        wall = time.monotonic() - t0
        results = {}
        for b, p in procs.items():
            used = cpu_s(p.pid) - c0[b]
            results[b] = {
                "cpu_pct_of_one_core": 100.0 * used / wall,
                "cpu_s": used,
                "wall_s": wall,
                "rss_mb": status_kb(p.pid, "VmRSS") / 1024,
                "peak_rss_mb": status_kb(p.pid, "VmHWM") / 1024,
                "threads": status_kb(p.pid, "Threads"),
                "smaps_rollup_kb": smaps_rollup(p.pid),
                "top_mappings_kb": top_mappings(p.pid),
                "interval_s": args.interval,
            }
    finally:
        for d in daemons.values():
            d.stop()
    print(
        f"gitmd cost at one sample every {args.interval:g} s, "
        f"{args.duration:g} s window after {args.warmup:g} s warm-up"
    )
    print("| backend | CPU % of one core | CPU s | RSS MB | peak RSS MB | threads |")
    print("| --- | --- | --- | --- | --- | --- |")
    for b, r in results.items():
        print(
            f"| {b} | {r['cpu_pct_of_one_core']:.2f} | {r['cpu_s']:.2f} | {r['rss_mb']:.1f} | "
            f"{r['peak_rss_mb']:.1f} | {r['threads']} |"
        )
    for b, r in results.items():
        roll = r["smaps_rollup_kb"]
        print(
            f"{b}: PSS {roll.get('Pss', 0) / 1024:.1f} MB (anonymous {roll.get('Pss_Anon', 0) / 1024:.1f}, "
            f"file {roll.get('Pss_File', 0) / 1024:.1f}); largest: "
            + ", ".join(f"{Path(k).name} {v / 1024:.1f}" for k, v in r["top_mappings_kb"])
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
