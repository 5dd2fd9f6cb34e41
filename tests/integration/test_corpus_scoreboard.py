"""The corpus scoreboard against the real daemon (simulated GPUs, no CUDA here): a CPU program of a
test manifest runs plain and through `gitmctl run` in pairs, its own clock read, its oracle over
gitmd's catalog; the summary is rebuilt from the raw file, with null where nothing was measured."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROG = """
import os, time
t0 = time.monotonic()
for _ in range(20):
    time.sleep(0.005)
print(f"step_ms={(time.monotonic() - t0) * 1e3 / 20:.4f}", flush=True)
print("result 42 " + os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "-"), flush=True)
"""
MANIFEST = """
schema = 1
[[program]]
name = "toy"
repo = "acme/toy"
commit = "0000000000000000000000000000000000000000"
licence = "MIT"
paths = ["toy.py"]
command = ["{python}", "toy.py"]
step_clock = 'step_ms=([0-9.]+)'
output = '^result (\\d+)'
kind = "cpu-test"
"""


def toy_corpus(top: Path) -> Path:
    """A one-program corpus under ``top`` (its materialised source and manifest): the manifest."""
    src = top / "src" / "acme+toy"
    src.mkdir(parents=True)
    (src / "toy.py").write_text(PROG)
    manifest = top / "corpus" / "manifest.toml"
    manifest.parent.mkdir()
    manifest.write_text(MANIFEST)
    return manifest


def scoreboard(top: Path, manifest: Path, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """bench/corpus/scoreboard.py on the toy corpus under ``top``, on the simulated backend."""
    return subprocess.run(
        [sys.executable, str(ROOT / "bench/corpus/scoreboard.py"), "--programs", "toy", *args,
         "--out", str(out), "--manifest", str(manifest), "--src", str(top / "src"), "--backend", "sim"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_the_corpus_scoreboard_and_its_summary_on_a_cpu_program(short_tmp: Path) -> None:
    manifest = toy_corpus(short_tmp)
    out = short_tmp / "results" / "2026-12-03-corpus-test"
    r = scoreboard(
        short_tmp, manifest, out, "--runs", "2", "--oracle-levers", "cuda_device_max_connections",
        "--oracle-pairs", "1",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((out / "corpus-toy.json").read_text())
    assert [x["run"] for x in doc["runs"]] == [1, 2] and doc["runs"][1]["order"] == ["gitmd", "plain"]
    assert all(x["ratio"] and x["ratio"] > 0 and x["cost"] is not None for x in doc["runs"])
    assert doc["summary"]["first_policy_run"] is None and doc["summary"]["delivered_speedup"] is None
    assert doc["summary"]["violations"] == 0 and doc["half"] == "unsplit"
    # one plain run came first, kept but never scored: it paid for the cold caches
    assert doc["warm_up"]["exit"] == 0 and doc["warm_up"]["wall_s"] > 0
    assert r.stdout.index("toy warm-up") < r.stdout.index("toy run 1")
    assert "warm-up (not scored)" in (out / "logs" / "toy.log").read_text().splitlines()[0]
    # each run carries gitmd's own record of its job (joined in order), and the daemon's log is kept
    jobs = [x["job"] for x in doc["runs"]]
    assert all(j and j["exit_code"] == 0 and j["id"] for j in jobs) and len({j["id"] for j in jobs}) == 2
    assert all(isinstance(j["windows"], int) and "cost" in j for j in jobs)
    assert all(j["experiments"] == [] for j in jobs) and doc["library"] == []  # nothing tried on CPU
    # gitmctl run timed each run from exec to exit and reported it: the run's length without a shim
    assert all(0 < j["wall_s"] <= x["gitmd"]["wall_s"] + 0.01 for j, x in zip(jobs, doc["runs"], strict=True))
    assert (out / "logs" / "toy-gitmd.log").stat().st_size > 0
    # each arm's use of the host, measured alike: its process tree's CPU (gitmd's arm holds gitmctl
    # run's own start too), its involuntary context switches, and the daemon's CPU meanwhile
    for x in doc["runs"]:
        assert all(x[arm]["cpu_s"] > 0 and x[arm]["nivcsw"] >= 0 for arm in ("plain", "gitmd")), x
        assert all(x[arm]["gitmd_cpu_s"] >= 0 for arm in ("plain", "gitmd")), x
    assert re.search(r"ratio [0-9.]+ \(cpu_s [0-9.]+/[0-9.]+ nivcsw \d+/\d+ gitmd_cpu_s ", r.stdout), r.stdout
    lever = doc["oracle"]["levers"]["cuda_device_max_connections"]
    assert lever["env"] and lever["outputs_held"]
    # the best setting: the lever when it beat the program as it is, else none ("plain", 1.0)
    faster = lever["speedup"] >= 1
    assert doc["oracle"]["best"] == ("cuda_device_max_connections" if faster else "plain")
    assert doc["oracle"]["best_speedup"] == (lever["speedup"] if faster else 1.0)
    assert "| toy | unsplit |" in r.stdout and "| none |" in r.stdout
    s = subprocess.run(
        [sys.executable, str(ROOT / "bench/corpus/summary.py"), "--results", str(short_tmp / "results"),
         "--manifest", str(manifest)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert s.returncode == 0 and "1 programs, 1 measured" in s.stdout, s.stderr
    (written,) = (short_tmp / "results").glob("*-corpus-summary.json")  # a new dated file
    (row,) = json.loads(written.read_text())["programs"]
    assert row["name"] == "toy" and row["oracle_speedup"] == doc["summary"]["oracle_speedup"]
    assert row["delivered_speedup"] is None and row["raw"].endswith("corpus-toy.json")


def test_a_spent_budget_runs_nothing_more_and_says_so(short_tmp: Path) -> None:
    manifest = toy_corpus(short_tmp)
    out = short_tmp / "results" / "2026-12-04-corpus-test"
    r = subprocess.run(
        [sys.executable, str(ROOT / "bench/corpus/scoreboard.py"), "--programs", "toy", "--runs", "2",
         "--oracle-levers", "none", "--out", str(out), "--manifest", str(manifest),
         "--src", str(short_tmp / "src"), "--backend", "sim", "--budget-s", "0"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert "toy: not run (budget spent)" in r.stdout
    assert not (out / "corpus-toy.json").exists()  # nothing measured: no raw file claims otherwise


def test_one_library_for_several_programs_interleaves_their_runs(short_tmp: Path) -> None:
    """--shared-library: one gitmd for every program of the call (as one host runs several), run 1
    of each, then run 2 of each; each raw file says which workloads its runs were given and which
    it shares with another program. Here: one script run with two arguments, as timm's
    benchmark.py --model X is six corpus programs (no fingerprint on the simulated backend: no
    workload, so nothing shared)."""
    manifest = toy_corpus(short_tmp)
    text = manifest.read_text()
    second = text.split("[[program]]")[1].replace('name = "toy"', 'name = "toy-b"')
    second = second.replace('"toy.py"]', '"toy.py", "--model", "b"]', 1)
    manifest.write_text(text + "[[program]]" + second)
    out = short_tmp / "results" / "2026-12-04-corpus-shared"
    r = subprocess.run(
        [sys.executable, str(ROOT / "bench/corpus/scoreboard.py"), "--programs", "toy,toy-b", "--runs", "2",
         "--oracle-levers", "none", "--out", str(out), "--manifest", str(manifest),
         "--src", str(short_tmp / "src"), "--backend", "sim", "--shared-library"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [x for x in r.stdout.splitlines() if " run " in x and ": ratio " in x]
    assert [x.split(":")[0] for x in lines] == ["toy run 1", "toy-b run 1", "toy run 2", "toy-b run 2"]
    docs = {n: json.loads((out / f"corpus-{n}.json").read_text()) for n in ("toy", "toy-b")}
    for name, doc in docs.items():
        assert [x["run"] for x in doc["runs"]] == [1, 2] and all(x["job"] for x in doc["runs"]), name
        shared = doc["shared_library"]
        assert shared["programs"] == ["toy", "toy-b"] and shared["shared_with"] == {"toy": {}, "toy-b": {}}
    ids = [{x["job"]["id"] for x in d["runs"]} for d in docs.values()]
    assert not ids[0] & ids[1]  # each program's runs joined to its own jobs
    assert (out / "logs" / "shared-gitmd.log").stat().st_size > 0


def test_an_oracle_measured_in_parts_is_merged_by_the_summary(short_tmp: Path) -> None:
    """A call too short for a whole oracle measures it in parts: `--runs 0` keeps a raw file with the
    oracle alone (no run claimed), a later call measures another lever beside its runs, and the
    summary takes every lever measured, each its newest, and the runs from the file that has them.
    Each oracle run's log says which lever it ran with."""
    manifest = toy_corpus(short_tmp)
    base = [sys.executable, str(ROOT / "bench/corpus/scoreboard.py"), "--programs", "toy",
            "--oracle-pairs", "1", "--manifest", str(manifest), "--src", str(short_tmp / "src"),
            "--backend", "sim"]  # fmt: skip
    first = short_tmp / "results" / "2026-12-05-corpus-a"
    r = subprocess.run(
        [*base, "--runs", "0", "--oracle-levers", "cuda_device_max_connections", "--out", str(first)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((first / "corpus-toy.json").read_text())
    assert doc["runs"] == [] and doc["summary"]["worst_run_cost"] is None
    assert doc["oracle"]["levers"]["cuda_device_max_connections"]["ratios"]
    kept = json.loads((first / "oracle-toy.json").read_text())  # written as each lever was measured
    assert kept["partial"] and set(kept["levers"]) == {"cuda_device_max_connections"}
    log = (first / "logs" / "toy-oracle.log").read_text()
    assert "=== toy [cuda_device_max_connections]" in log and "=== toy [plain]" in log
    bad = subprocess.run([*base, "--runs", "0", "--oracle-levers", "cpu_threads+nope", "--out", str(first)],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert bad.returncode == 2 and "not launch levers ['nope']" in bad.stderr  # refused, nothing ran
    second = short_tmp / "results" / "2026-12-06-corpus-b"
    r = subprocess.run(
        [*base, "--runs", "1", "--oracle-levers", "cpu_threads,cpu_threads+cuda_device_max_connections",
         "--out", str(second)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    later = json.loads((second / "corpus-toy.json").read_text())
    s = subprocess.run(
        [sys.executable, str(ROOT / "bench/corpus/summary.py"), "--results", str(short_tmp / "results"),
         "--manifest", str(manifest), "--out", str(short_tmp / "summary.json")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert s.returncode == 0, s.stderr
    (row,) = json.loads((short_tmp / "summary.json").read_text())["programs"]
    # the pair of an oracle in parts, measured as one setting (both variables in its runs)
    pair = later["oracle"]["levers"]["cpu_threads+cuda_device_max_connections"]
    assert set(pair["env"]) == {"OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_DEVICE_MAX_CONNECTIONS"}
    assert row["oracle_levers"] == [
        "cpu_threads",
        "cpu_threads+cuda_device_max_connections",
        "cuda_device_max_connections",
    ]
    assert len(row["oracle_raw"]) == 2 and row["raw"].endswith("2026-12-06-corpus-b/corpus-toy.json")
    assert row["runs"] == 1 and row["worst_run_cost"] == later["summary"]["worst_run_cost"]
    levers = {**doc["oracle"]["levers"], **later["oracle"]["levers"]}
    top = max(v["speedup"] for v in levers.values())
    assert row["oracle_speedup"] == (top if top >= 1 else 1.0)


def test_the_oracle_runs_site_levers_as_a_launcher_does_and_stops_one_that_changes_nothing(
    short_tmp: Path,
) -> None:
    """A lever acting through gitmd's sitecustomize gets the site first on PYTHONPATH, as `gitmctl run`
    gives a plan (before, the oracle never put it there: no such knob could act). The program imports
    PyTorch (a stand-in package beside it) and builds no DataLoader: the site's report says the knob
    changed nothing, so the lever gets one pair, not three, and is never the oracle's best."""
    manifest = toy_corpus(short_tmp)
    manifest.write_text(
        manifest.read_text().replace('kind = "cpu-test"', 'kind = "cpu-test"\nneeds = ["torch"]')
    )
    fake = short_tmp / "src" / "acme+toy" / "torch"
    (fake / "utils" / "data").mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "class cuda:\n    @staticmethod\n    def is_available(): return False\n"
    )
    (fake / "utils" / "__init__.py").write_text("")
    (fake / "utils" / "data" / "__init__.py").write_text("class DataLoader:\n    pass\n")
    (short_tmp / "src" / "acme+toy" / "toy.py").write_text("import torch\n" + PROG)
    out = short_tmp / "results" / "2026-12-05-corpus-site"
    r = scoreboard(short_tmp, manifest, out, "--runs", "0", "--oracle-levers", "dataloader_workers",
                   "--oracle-pairs", "3")  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((out / "corpus-toy.json").read_text())
    lever = doc["oracle"]["levers"]["dataloader_workers"]
    assert len(lever["ratios"]) == 1 and "GITMD_DATALOADER_WORKERS changed nothing" in lever["not_applicable"]
    assert doc["oracle"]["best"] is None and not doc["oracle"]["measured"]
    log = (out / "logs" / "toy-oracle.log").read_text()
    assert log.count("=== toy [dataloader_workers]") == 1
