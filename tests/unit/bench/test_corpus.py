"""The corpus manifest and its held-out split (bench/corpus/)."""

import importlib.util
import json
import re
import sys
import tomllib
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[3] / "bench" / "corpus"
REQUIRED = (
    "name",
    "repo",
    "commit",
    "licence",
    "paths",
    "command",
    "env",
    "data",
    "step_clock",
    "step_clock_unit",
    "output",
    "kind",
    "threads",
    "expected_s",
    "verified",
    "needs",
    "notes",
)


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"corpus_{name}", CORPUS / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def programs() -> list[dict]:
    with (CORPUS / "manifest.toml").open("rb") as f:
        return tomllib.load(f)["program"]


@pytest.fixture(scope="module")
def split_doc() -> dict:
    with (CORPUS / "split.toml").open("rb") as f:
        return tomllib.load(f)


def test_every_entry_has_the_required_fields(programs: list[dict]) -> None:
    for p in programs:
        missing = [k for k in REQUIRED if k not in p]
        assert not missing, f"{p.get('name')}: lacks {missing}"
        assert re.fullmatch(r"[0-9a-f]{40}", p["commit"]), p["name"]
        assert p["command"] and p["command"][0] == "{python}", p["name"]
        assert isinstance(p["verified"], bool), p["name"]
        if p["step_clock"] != "wall":
            re.compile(p["step_clock"])
        if p["output"] != "exit":
            re.compile(p["output"])
        assert p.get("step_clock_stream", "stdout") in ("stdout", "stderr"), p["name"]


def test_unverified_entries_are_not_measured(programs: list[dict]) -> None:
    for p in programs:
        if p["verified"]:
            assert isinstance(p["expected_s"], int | float), p["name"]
        else:
            assert p["expected_s"] == "not measured", p["name"]


def test_corpus_size_and_exclusions(programs: list[dict]) -> None:
    assert len(programs) >= 16
    assert len({p["name"] for p in programs}) == len(programs)
    assert len({p["repo"] for p in programs}) >= 5
    assert sum(p["kind"] == "non-torch" for p in programs) >= 3
    for p in programs:
        assert not p["repo"].lower().startswith("karpathy/"), p["name"]
        assert p["repo"].lower() != "pytorch/examples", p["name"]


def test_split_covers_exactly_the_manifest(programs: list[dict], split_doc: dict) -> None:
    assert set(split_doc["program"]) == {p["name"] for p in programs}
    assert set(split_doc["program"].values()) <= {"dev", "test"}


def test_split_is_what_the_committed_seed_gives(programs: list[dict], split_doc: dict) -> None:
    split = _load("split")
    assert split_doc["seed"] == split.SEED
    assert split_doc["program"] == split.split(programs, split.SEED)
    assert split.RULE in (CORPUS / "split.toml").read_text()
    assert split.split(programs, split.SEED, split_doc["program"]) == split_doc["program"]


def test_a_program_added_later_moves_no_other(programs: list[dict], split_doc: dict) -> None:
    """A held-out program never moves to the dev half: new programs are dealt around the committed
    split, each kind to the half with fewer of it."""
    split = _load("split")
    kind = programs[0]["kind"]
    more = [*programs, {"name": "zz-new-a", "kind": kind}, {"name": "zz-new-b", "kind": kind}]
    grown = split.split(more, split.SEED, split_doc["program"])
    assert {n: grown[n] for n in split_doc["program"]} == split_doc["program"]
    halves = [grown[p["name"]] for p in more if p["kind"] == kind]
    assert abs(halves.count("dev") - halves.count("test")) <= 1


def test_split_is_balanced_by_kind(programs: list[dict], split_doc: dict) -> None:
    halves = split_doc["program"]
    assert abs(sum(h == "dev" for h in halves.values()) - sum(h == "test" for h in halves.values())) <= 1
    for kind in {p["kind"] for p in programs}:
        names = [p["name"] for p in programs if p["kind"] == kind]
        dev = sum(halves[n] == "dev" for n in names)
        assert abs(dev - (len(names) - dev)) <= 1, kind


def test_materialise_accepts_the_manifest(programs: list[dict]) -> None:
    materialise = _load("materialise")
    loaded = materialise.load_manifest(CORPUS / "manifest.toml")
    assert [p["name"] for p in loaded] == [p["name"] for p in programs]
    materialise.group_by_repo(loaded)  # one commit per repo


def test_the_summary_gives_the_noise_a_runs_cost_is_read_against() -> None:
    """Each gitmd run is judged against one plain run beside it; on the H200 two plain runs of one
    program in a row differed by up to 52% (timm-validate-imagefolder, 2026-12-04). The summary
    gives, per program, the largest difference between neighbouring plain runs of the same call
    (BA then AB), and how many of the asked runs were measured."""
    summary = _load("summary")

    def run(order: list[str], plain: float | None, clock: bool = True) -> dict:
        side = {"clock": plain, "wall_s": 99.0} if clock else {"clock": None, "wall_s": plain}
        return {"order": order, "plain": side, "gitmd": {}}

    ab, ba = ["plain", "gitmd"], ["gitmd", "plain"]
    doc = {"runs": [run(ab, 10.0), run(ba, 10.0), run(ab, 12.5), run(ba, 11.0), run(ab, 11.0)]}
    assert summary.plain_spread(doc) == 0.2  # 10.0 then 12.5; 11.0 then 11.0
    wall = {"runs": [run(ba, 4.0, clock=False), run(ab, 5.0, clock=False)]}
    assert summary.plain_spread(wall) == 0.2  # no clock of its own: wall time
    assert summary.plain_spread({"runs": [run(ab, 10.0), run(ba, 10.0)]}) is None  # no neighbours
    # a run whose order is empty (it failed before either side ran) is no neighbour, and no crash
    assert summary.plain_spread({"runs": [{**run(ba, 10.0), "order": []}, run(ab, 12.0)]}) is None


def test_the_summary_never_overwrites_a_results_file(tmp_path: Path) -> None:
    """bench/results is append-only: a summary written to a file that exists is refused, the file
    unchanged (`make corpus-summary` names a new dated one)."""
    summary = _load("summary")
    old = tmp_path / "2026-12-04-corpus-summary.json"
    old.write_text('{"programs": []}\n')
    assert summary.main(["--results", str(tmp_path), "--out", str(old)]) == 2
    assert old.read_text() == '{"programs": []}\n'


def test_a_programs_share_of_the_gpus_ceiling(programs: list[dict]) -> None:
    """A GEMM- or copy-bound program says what one reading of its own clock is worth (`work`), from
    its command; its throughput by that clock is held to a peak measured in the same call. Every
    such entry is usable and reads its own clock (wall time would count start-up as work)."""
    ceiling = _load("ceiling")
    sgemm = next(p for p in programs if p["name"] == "cupy-sgemm")
    assert sgemm["work"]["per_clock"] == 2 * 4096**3  # its command's --m/--n/--k 4096
    for p in programs:
        if "work" in p:
            assert ceiling.check_work(p["work"]) == "", p["name"]
            assert p["step_clock"] != "wall", p["name"]
    work = sgemm["work"]
    assert abs(ceiling.throughput(work, 20.0) - 2 * 4096**3 / 0.020 / 1e12) < 1e-9  # 20 ms: 6.87 TFLOP/s
    peaks = {"fp32_gemm": {"value": 50.0, "unit": "TFLOP/s"}}
    c = ceiling.ceiling(work, [20.0, 22.0, None], [10.0, 11.0], peaks)  # type: ignore[list-item]
    assert c["unit"] == "TFLOP/s" and c["peak_value"] == 50.0
    assert c["plain_fraction"] == round(2 * 4096**3 / 0.021 / 1e12 / 50.0, 4)  # the median reading
    assert c["gitmd_fraction"] == round(2 * 4096**3 / 0.0105 / 1e12 / 50.0, 4)
    nothing = ceiling.ceiling(work, [20.0], [], {"error": "no CUDA device"})
    assert nothing["plain_fraction"] is None and nothing["gitmd_value"] is None  # not measured: null
    assert "work.peak" in ceiling.check_work({"peak": "fp64", "per_clock": 1, "clock_s": 1})
    assert "work.clock_s" in ceiling.check_work({"peak": "fp32_gemm", "per_clock": 1, "clock_s": 0})


def _soak():
    spec = importlib.util.spec_from_file_location("crash_soak", CORPUS.parent / "crash_soak.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["crash_soak"] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "corpus"


def test_a_clock_that_reads_a_rate() -> None:
    """A step clock whose pattern names a group `per_s` reads a rate, its reciprocal the time. The
    imagefolder trainer's own log from the H200 (2026-12-04): the epoch's running rate on its last
    update, epochs after the first (1290.14/s and 1288.58/s), not the latest update's time rounded to
    the millisecond (0.023 s), whose median moved 10-30% between plain runs. The validation program's
    (2026-12-04): the running rate on its last log line only (1102.52/s)."""
    mod = _soak()
    train = mod.corpus_programs()["timm-train-imagefolder-amp"]
    log = (FIXTURES / "timm-train-imagefolder-amp-stderr-h200.txt").read_text()
    assert mod.clock(train, log) == pytest.approx((1 / 1290.14 + 1 / 1288.58) / 2)
    assert mod.clock(train, "Train: 0 [  39/40 (100%)]  Time: 0.016s, 4017.05/s  (0.287s,  222.83/s)") is None
    val = mod.corpus_programs()["timm-validate-imagefolder"]
    log = (FIXTURES / "timm-validate-imagefolder-stderr-h200.txt").read_text()
    assert mod.clock(val, log) == pytest.approx(1 / 1102.52)
    seconds = mod.Program("t", [], Path("."), clock=r"step (?P<per_s>[0-9.]+)/s")
    assert mod.clock(seconds, "step 0/s\nstep 4/s\nstep 2/s") == pytest.approx(0.375)  # no division by 0


def test_a_clocks_rounding_is_said() -> None:
    """How coarse a clock is, as a share of its reading: the imagefolder programs' old clocks (times
    printed to the millisecond on ~23-ms batches) were 4-5% coarse, so a 2% cost could not show in
    them; their rate clocks are finer than 0.01%. The summary keeps the coarsest of a file's runs."""
    mod = _soak()
    log = (FIXTURES / "timm-validate-imagefolder-stderr-h200.txt").read_text()
    old = mod.Program("old", [], Path("."), clock=r"Test: \[\s*\d+/\d+\]\s+Time: ([0-9.]+)s")
    assert mod.clock_quantum(old, log) == pytest.approx(0.001 / 0.0235, rel=1e-2)  # median of 8 readings
    new = mod.corpus_programs()["timm-validate-imagefolder"]
    assert mod.clock_quantum(new, log) == pytest.approx(0.01 / 1102.52, rel=1e-2)  # a rate to 0.01/s
    assert mod.clock_quantum(new, "nothing printed") is None
    assert mod.clock_quantum(mod.Program("w", [], Path("."), clock="wall"), log) is None
    summary = _load("summary")
    runs = [{"plain": {"clock_quantum": 0.01}, "gitmd": {"clock_quantum": 0.04}}, {"plain": {}, "gitmd": {}}]
    assert summary.clock_quantum({"runs": runs}) == 0.04
    assert summary.clock_quantum({"runs": [{"plain": {}, "gitmd": {}}]}) is None  # older files


def test_every_step_clock_compiles(programs: list[dict]) -> None:
    for p in programs:
        if p["step_clock"] != "wall":
            rx = re.compile(p["step_clock"])
            assert rx.groups >= 1, p["name"]


def test_the_summary_with_no_out_writes_the_days_next_file(tmp_path: Path) -> None:
    """With no --out, the summary goes to a new dated file, the day's second to -2 (bench/results is
    append-only: it never overwrites an earlier summary), and corpus-latest.json is a link to the
    newest; a corpus-latest.json that is a file is a result and stays as it is."""
    summary = _load("summary")
    assert summary.main(["--results", str(tmp_path)]) == 0
    assert summary.main(["--results", str(tmp_path)]) == 0
    latest = tmp_path / "corpus-latest.json"
    names = sorted(p.name for p in tmp_path.iterdir() if p != latest)
    assert (
        len(names) == 2
        and names[0].endswith("-corpus-summary-2.json")
        and names[1].endswith("-corpus-summary.json")
    )
    assert latest.is_symlink() and str(latest.readlink()) == names[0]
    assert json.loads(latest.read_text())["programs"]
    other = tmp_path / "other"
    other.mkdir()
    (other / "corpus-latest.json").write_text("{}")  # an old summary kept under that name
    assert summary.main(["--results", str(other)]) == 0
    assert (other / "corpus-latest.json").read_text() == "{}"


def test_the_scoreboard_archives_the_windows_gitmd_kept(tmp_path: Path) -> None:
    """Each job's newest window is kept (capture.keep_windows = 1) and archived per program: captures
    of programs nobody here wrote, for the fingerprint's recall on programs it was not tuned on."""
    import tarfile
    from types import SimpleNamespace

    board = _load("scoreboard")
    assert "keep_windows = 1" in board.KEEP_WINDOWS
    lib = tmp_path / "v" / "lib"
    g = SimpleNamespace(db=lib / "gitmd.db")
    assert board.archive_windows(g, tmp_path / "none.tgz") is False  # nothing kept: no archive
    assert not (tmp_path / "none.tgz").exists()
    (lib / "windows" / "abc123").mkdir(parents=True)
    (lib / "windows" / "abc123" / "7.npz").write_bytes(b"npz")
    assert board.archive_windows(g, tmp_path / "w.tgz") is True
    with tarfile.open(tmp_path / "w.tgz") as tar:
        assert "windows/abc123/7.npz" in tar.getnames()
    # one library for several programs: each program's archive holds its own jobs' windows only
    (lib / "windows" / "def456").mkdir()
    (lib / "windows" / "def456" / "2.npz").write_bytes(b"npz")
    assert board.archive_windows(g, tmp_path / "mine.tgz", {"def456"}) is True
    with tarfile.open(tmp_path / "mine.tgz") as tar:
        assert tar.getnames() == ["windows/def456", "windows/def456/2.npz"]
    assert board.archive_windows(g, tmp_path / "nobody.tgz", {"zzz"}) is False


def test_one_librarys_programs_say_which_workloads_they_share() -> None:
    board = _load("scoreboard")

    def runs(*wids: str) -> list[dict]:
        return [{"job": {"workload_id": w}} for w in wids] + [{"job": None}]

    got = board.shared_workloads({"a": runs("w1", "w1"), "b": runs("w2", "w1"), "c": runs("", "w3")})
    assert got["workloads"] == {"a": ["w1"], "b": ["w1", "w2"], "c": ["w3"]}
    assert got["shared_with"] == {"a": {"b": ["w1"]}, "b": {"a": ["w1"]}, "c": {}}


def test_the_runs_ratios_get_an_interval() -> None:
    """Per program, the K runs' paired ratios and their 95% interval (gitmd's t rule): ResNet-18
    bf16's five runs on the H200 (2026-12-04) hold 1, so gitmd's runs differed from plain ones by no
    more than the pairs' noise; the delivered interval is null with no policy."""
    board = _load("scoreboard")

    def run(i: int, ratio: float, policy: bool = False) -> dict:
        return {"run": i, "ratio": ratio, "cost": round(max(0.0, 1 / ratio - 1), 4), "violation": False,
                "policy_at_launch": policy}  # fmt: skip

    s = board.summarise([run(1, 1.0034), run(2, 0.9829), run(3, 0.9723), run(4, 1.1305), run(5, 1.0063)])
    low, high = s["ratio_interval"]
    assert low < 1 < high and s["delivered_interval"] is None and s["worst_run_cost"] == 0.0285
    s = board.summarise(
        [run(1, 0.98), run(2, 1.0), run(3, 2.01, True), run(4, 1.99, True), run(5, 2.0, True)]
    )
    assert s["first_policy_run"] == 3 and s["delivered_speedup"] == 2.0
    low, high = s["delivered_interval"]
    assert 1.9 < low < 2.0 < high < 2.1


def test_the_summary_gives_older_files_their_ratio_interval() -> None:
    summary = _load("summary")
    ratios = [1.0034, 0.9829, 0.9723, 1.1305, 1.0063]
    board = _load("scoreboard")
    doc = {"runs": [{"ratio": r} for r in ratios] + [{"ratio": None}]}
    assert summary.ratio_interval(doc) == board.interval(ratios)
    assert summary.ratio_interval({"runs": [{"ratio": 1.0}]}) is None


def test_the_summary_orders_one_days_files_by_the_commit_they_measured(tmp_path: Path) -> None:
    """Two sessions of one day: "twentythird" sorts after "twentyfourth" by path, but the later
    session measured a later commit (git's committer time orders them; this repository's own
    commits: c58e7ad came after b108330)."""
    summary = _load("summary")

    def doc(commit: str, worst: float) -> dict[str, object]:
        return {
            "program": "timm-train-imagefolder-amp",
            "measured_at": {"date": "2026-12-04", "gitmd_commit": commit},
            "runs": [{"run": 1, "ratio": 1 / (1 + worst)}],
            "summary": {"worst_run_cost": worst},
        }

    for folder, commit, worst in (("twentyfourth", "c58e7ad", 0.2), ("twentythird", "b108330", 0.3)):
        d = tmp_path / "results" / folder
        d.mkdir(parents=True)
        (d / "corpus-timm-train-imagefolder-amp.json").write_text(json.dumps(doc(commit, worst)))
    if summary.commit_time({"gitmd_commit": "c58e7ad"}) == 0:
        pytest.skip("this clone does not hold the commits (a shallow clone)")
    rows = summary.build(tmp_path / "results", summary.CORPUS / "manifest.toml")
    (row,) = [r for r in rows if r["name"] == "timm-train-imagefolder-amp"]
    assert row["worst_run_cost"] == 0.2 and "twentyfourth" in row["raw"]
    assert summary.commit_time({"gitmd_commit": "83113fb+uncommitted"}) > 0
    assert summary.commit_time({"gitmd_commit": "not-a-commit"}) == 0


def test_a_killed_calls_oracle_so_far_is_merged_and_a_runless_file_claims_no_runs(tmp_path: Path) -> None:
    """A call killed mid-oracle leaves only oracle-<program>.json (written lever by lever): its levers
    count, dated by their folder; an oracle-only raw file (--runs 0) gives its oracle but not the
    program's runs, which stay those of the newest file that has any."""
    summary = _load("summary")
    name = "timm-resnet18-train-fp32"
    lever = {"env": {"X": "1"}, "ratios": [1.2, 1.1], "speedup": 1.15, "outputs_held": True}
    older = {"env": {"Y": "1"}, "ratios": [0.9], "speedup": 0.9, "outputs_held": True}
    newer = {"env": {"Y": "1"}, "ratios": [1.3, 1.25], "speedup": 1.275, "outputs_held": True}
    changed = {"env": {"Z": "1"}, "ratios": [3.0], "speedup": 3.0, "outputs_held": False}
    unrun = {"env": {}, "not_measured": "budget spent"}
    files = {
        "2026-12-03-a/corpus": {
            "program": name, "measured_at": {"date": "2026-12-03", "gitmd_commit": ""},
            "oracle": {"measured": True, "levers": {"y": older}}, "runs": [{"run": 1, "ratio": 0.9}],
            "summary": {"worst_run_cost": 0.11},
        },
        "2026-12-05-b/oracle": {"program": name, "partial": True, "levers": {"x": lever, "z": changed}},
        "2026-12-06-c/corpus": {
            "program": name, "measured_at": {"date": "2026-12-06", "gitmd_commit": ""},
            "oracle": {"measured": True, "levers": {"y": newer, "w": unrun}},
            "runs": [], "summary": {"worst_run_cost": None},
        },
    }  # fmt: skip
    for where, doc in files.items():
        folder, kind = where.split("/")
        (tmp_path / "results" / folder).mkdir(parents=True)
        (tmp_path / "results" / folder / f"{kind}-{name}.json").write_text(json.dumps(doc))
    rows = summary.build(tmp_path / "results", summary.CORPUS / "manifest.toml")
    (row,) = [r for r in rows if r["name"] == name]
    assert row["oracle_levers"] == ["x", "y", "z"]  # measured ones; "w" never was
    assert row["oracle_best"] == "y" and row["oracle_speedup"] == 1.275  # z changed outputs
    assert row["oracle_measured_on"] == "2026-12-06" and len(row["oracle_raw"]) == 2
    assert "2026-12-03-a" in row["raw"] and row["worst_run_cost"] == 0.11 and row["runs"] == 1


def test_the_oracle_starts_no_pair_once_its_budget_is_spent(tmp_path: Path) -> None:
    sys.path.insert(0, str(CORPUS.parents[1]))
    from bench.corpus.oracle import measure_env
    from bench.crash_soak import Program

    p = Program("toy", ["/bin/false"], tmp_path)
    got = measure_env(p, {"X": "1"}, 3, tmp_path, 10.0, deadline=0.0, label="x")
    assert got == {"env": {"X": "1"}, "not_measured": "budget spent after 0 of 3 pairs"}
    assert not (tmp_path / "toy-oracle.log").exists()  # nothing ran


def test_the_oracle_merge_prefers_whole_measurements_and_orders_a_days_files_by_their_commit(
    tmp_path: Path,
) -> None:
    """A lever's newer measurement the budget stopped after one pair does not replace an older whole
    one; a partial oracle file stamped with a later commit is newer than a raw file of the same day
    at an earlier one (c58e7ad came after b108330 in this repository); every lever changing the
    outputs leaves "plain" at 1.0; an unreadable file (a write killed halfway) is left out."""
    summary = _load("summary")
    if summary.commit_time({"gitmd_commit": "c58e7ad"}) == 0:
        pytest.skip("this clone does not hold the commits (a shallow clone)")
    name = "cupy-cg"
    whole = {"env": {"X": "1"}, "ratios": [1.2, 1.2, 1.2], "speedup": 1.2, "outputs_held": True}
    cut = {"env": {"X": "1"}, "ratios": [0.8], "speedup": 0.8, "outputs_held": True, "stopped": "budget"}
    later = {"env": {"Y": "1"}, "ratios": [1.1, 1.1], "speedup": 1.1, "outputs_held": True}
    earlier = {"env": {"Y": "1"}, "ratios": [1.5, 1.5], "speedup": 1.5, "outputs_held": True}
    day = {"date": "2026-12-04"}
    files = {
        "a/corpus": {"program": name, "measured_at": {**day, "gitmd_commit": "b108330"},
                     "oracle": {"levers": {"x": whole, "y": earlier}}, "runs": [{"run": 1}], "summary": {}},
        "b/oracle": {"program": name, "partial": True, "measured_at": {**day, "gitmd_commit": "c58e7ad"},
                     "levers": {"x": cut, "y": later}},
    }  # fmt: skip
    for where, doc in files.items():
        folder, kind = where.split("/")
        (tmp_path / folder).mkdir()
        (tmp_path / folder / f"{kind}-{name}.json").write_text(json.dumps(doc))
    (tmp_path / "b" / "oracle-cupy-sgemm.json").write_text('{"program": "cupy-sgemm", "lev')  # cut short
    merge = summary.merged_oracle
    rows = {r["name"]: r for r in summary.build(tmp_path, summary.CORPUS / "manifest.toml")}
    assert rows[name]["oracle_best"] == "x" and rows[name]["oracle_speedup"] == 1.2  # whole x; later y
    assert rows["cupy-sgemm"]["oracle_speedup"] is None
    changed = {"env": {}, "ratios": [3.0], "speedup": 3.0, "outputs_held": False}
    assert merge([(("2026-12-05", 0, "f"), "f", {"z": changed})])["best"] == "plain"
    assert merge([(("2026-12-05", 0, "f"), "f", {"z": changed})])["speedup"] == 1.0
    assert merge([])["speedup"] is None


def test_an_oracle_pair_that_would_end_past_the_budget_does_not_start(tmp_path: Path) -> None:
    """The next pair starts only when the last one's length still fits before the deadline; a run
    the budget had to stop is no evidence (not "outputs changed"). Each pair is handed over as it
    ends, so a call killed later keeps it."""
    import time

    sys.path.insert(0, str(CORPUS.parents[1]))
    from bench.corpus.oracle import measure_env
    from bench.crash_soak import Program

    code = "import time; time.sleep(0.4); print('step_ms=1.0'); print('result 42')"
    p = Program("toy", [sys.executable, "-c", code], tmp_path, {}, r"^result (\d+)", r"step_ms=([0-9.]+)")
    seen: list[dict] = []
    got = measure_env(p, {"X": "1"}, 3, tmp_path, 30.0, deadline=time.monotonic() + 1.2, each=seen.append)
    assert (
        got["ratios"] == [1.0] and got["outputs_held"] and got["stopped"] == "budget spent after 1 of 3 pairs"
    )
    assert [s["ratios"] for s in seen] == [[1.0]]
    # a budget that ends inside a run (its limit: what is left, 1 s at least): dropped, not judged
    slow = Program("toy", [sys.executable, "-c", code.replace("0.4", "1.6")], tmp_path, {}, p.output, p.clock)
    got = measure_env(slow, {"X": "1"}, 2, tmp_path, 30.0, deadline=time.monotonic() + 2.0)
    assert got == {"env": {"X": "1"}, "not_measured": "budget spent during pair 1 of 2"}
