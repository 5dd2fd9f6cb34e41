"""bench/clock_spread.py on a CPU program that loads its injection library as the CUDA driver does:
each run's length from its CUDA start is read from the clock library's stamps, inside its wall time."""

from __future__ import annotations

import sys
from pathlib import Path

from bench.clock_spread import measure, spread
from bench.crash_soak import Program

FAKE = """
import ctypes, os, sys, time
time.sleep(0.3)
if os.environ.get("CUDA_INJECTION64_PATH"):
    ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"]).InitializeInjection()
time.sleep(0.2)
print("step_ms=2.5")
"""


def test_the_clocks_of_runs_with_and_without_the_library(shim_tools: Path, tmp_path: Path) -> None:
    script = tmp_path / "fake.py"
    script.write_text(FAKE)
    p = Program("fake", [sys.executable, str(script)], tmp_path, clock=r"step_ms=([0-9.]+)")
    r = measure(p, 4, 30, tmp_path / "log.txt", float("inf"))
    assert [g["library"] for g in r["runs"]] == [True, False, False, True] and r["warm_up"]["exit"] == 0
    for g in r["runs"]:
        assert g["exit"] == 0 and g["own"] == 2.5
        assert (g["cuda_s"] is not None) == g["library"]
        if g["library"]:
            assert 0.19 <= g["cuda_s"] < g["wall_s"] - 0.29
    assert r["library_runs_stamped"] == 2 and r["library_cost_own_clock"] == 1.0
    assert 0 < r["cuda_share"] < 1 and r["clocks"]["wall_s"]["runs"] == 4
    assert r["clocks"]["cuda_s"]["spread"] is None  # two runs: too few to say a spread


def test_a_spread_needs_three_runs() -> None:
    assert spread([1.0, 2.0])["spread"] is None
    s = spread([10.0, 11.0, 12.0])
    assert s["spread"] == round(2 / 11, 4) and s["pair_sd"] is not None
