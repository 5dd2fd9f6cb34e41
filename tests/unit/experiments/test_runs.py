"""Deciding a launch trial from its runs by their own clock: the full rounds, the plausibility bound,
an early stop only for a large effect beyond the workload's measured run-to-run spread."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from gitmd.experiments.equivalence import Check, Contract
from gitmd.experiments.run_decision import decide_trial, run_noise
from gitmd.experiments.runs import LaunchTrial

CONTRACT = Contract((Check("exit_status"), Check("stdout_metric", regex=r"loss=(\S+)", rtol=1e-2)))
_ids = itertools.count()


def run(
    arm: str, run_s: float | None, loss: float = 1.0, exit_code: int = 0, crashed: str = ""
) -> dict[str, Any]:
    r: dict[str, Any] = {
        "job_id": f"j{next(_ids)}",
        "arm": arm,
        "done": True,
        "run_s": run_s,
        "exit_code": exit_code,
        "metrics": {r"loss=(\S+)": [loss]},
    }
    if crashed:
        r["crashed"] = crashed
    return r


def trial(*runs: dict[str, Any], lever: str = "tf32_override", share: float = 0.9) -> LaunchTrial:
    return LaunchTrial(1, "w", lever, {}, "fp32_gemm", "running", list(runs), {}, share)


def test_an_early_stop_needs_a_measured_spread_and_a_gain_far_beyond_it() -> None:
    fast = trial(run("A", 40.0), run("B", 12.0, 1.001))
    # no run-to-run spread measured for the workload yet: one pair never decides
    assert decide_trial(fast, CONTRACT, 3, 0.03, 1.5) is None
    # one earlier plain run and the A arm agree to 0.1%: two runs are no measured spread (H200)
    assert decide_trial(fast, CONTRACT, 3, 0.03, 1.5, earlier_plain_s=[40.04]) is None
    # earlier plain runs spread 5%: 3.3x on one pair is far beyond it and within 10x (90% share)
    d = decide_trial(fast, CONTRACT, 3, 0.03, 1.5, earlier_plain_s=[39.0, 41.0])
    assert d is not None and d.promote and d.interval is not None and d.interval.pairs == 1
    # the stored interval is a real one, around the measured gain, not the worst pair
    assert d.interval.low < 40 / 12 < d.interval.high and d.interval.low > 1.03
    # plain runs spread 37% (30, 40, 45 s): 2x is not beyond 3 x that, so more pairs are needed
    double = trial(run("A", 40.0), run("B", 20.0, 1.001))
    assert decide_trial(double, CONTRACT, 3, 0.03, 1.5, earlier_plain_s=[30.0, 45.0]) is None
    assert decide_trial(double, CONTRACT, 3, 0.03, 1.5, earlier_plain_s=[39.0, 41.0]) is not None
    assert decide_trial(fast, CONTRACT, 3, 0.03, 0.0, earlier_plain_s=[39.0, 41.0]) is None  # early stops off
    assert decide_trial(trial(run("A", 40.0)), CONTRACT, 3, 0.03, 1.5) is None  # no pair yet


def test_two_pairs_that_agree_on_a_large_gain_decide_early_by_their_own_t_interval() -> None:
    """TF32 on the H200 (2026-12-04): arms A 22.48 and 22.09 s, B 10.21 and 10.50 s, every plain run
    before the trial observed (on the shim's clock, not the trial's): the two pairs' paired t interval
    (1 degree of freedom) decides, not a third A arm for the spread."""
    runs = [run("A", 22.48), run("B", 10.21, 1.00001), run("B", 10.50, 1.00001), run("A", 22.09)]
    d = decide_trial(trial(*runs), CONTRACT, 3, 0.03, 1.5)
    assert d is not None and d.promote and d.interval is not None and d.interval.pairs == 2
    assert 1.5 < d.interval.low < 2.147 < d.interval.high and "paired t over 2 pairs" in d.reason
    # pairs that disagree (2.2x, then 1.6x): the interval reaches far below, more pairs are needed
    apart = [run("A", 22.0), run("B", 10.0), run("B", 13.75), run("A", 22.0)]
    assert decide_trial(trial(*apart), CONTRACT, 3, 0.03, 1.5) is None
    # one pair under the early bound: no early stop whatever the interval
    small = [run("A", 22.0), run("B", 16.0), run("B", 16.1), run("A", 22.1)]
    assert decide_trial(trial(*small), CONTRACT, 3, 0.03, 1.5) is None
    # beyond what the cause allows (17% share: 1.2x at most): never early
    assert (
        decide_trial(trial(*runs, lever="cuda_device_max_connections", share=0.17), CONTRACT, 3, 0.03, 1.5)
        is None
    )
    # early stops off
    assert decide_trial(trial(*runs), CONTRACT, 3, 0.03, 0.0) is None


def test_a_gain_above_what_its_cause_allows_is_never_promoted() -> None:
    """The false promotion seen on the H200 (2026-12-03): launch_bound cost 17% of the run, so removing
    it gives at most 1.2x; a 3x measured is a measurement error."""
    big = trial(run("A", 30.0), run("B", 10.0), lever="cuda_device_max_connections", share=0.17)
    assert decide_trial(big, CONTRACT, 3, 0.03, 1.5, earlier_plain_s=[29.9, 30.1]) is None  # no early stop
    full = trial(
        *[x for _ in range(3) for x in (run("A", 30.0), run("B", 10.0))],
        lever="cuda_device_max_connections",
        share=0.17,
    )
    d = decide_trial(full, CONTRACT, 3, 0.03, 1.5)
    assert d is not None and not d.promote and "implausible" in d.reason
    # the same gain within the bound of a cause that costs 80% is a win
    ok = trial(*full.runs, lever="cuda_device_max_connections", share=0.8)
    d = decide_trial(ok, CONTRACT, 3, 0.03, 1.5)
    assert d is not None and d.promote


def test_the_program_clock_decides_not_the_windows() -> None:
    """Arm B 1.1x faster at best by the run's clock: nothing promoted after the full rounds."""
    runs = [run("A", 20.0), run("B", 19.6), run("B", 20.5), run("A", 20.1), run("A", 19.8), run("B", 20.2)]
    d = decide_trial(trial(*runs, lever="cuda_device_max_connections", share=0.17), CONTRACT, 3, 0.03, 1.5)
    assert d is not None and not d.promote and "lower bound" in d.reason


def test_a_crashed_run_is_never_evidence() -> None:
    """A run that died by a signal spoils its pair: the exit status -11 is not taken as the program's
    output (H200 2026-12-03: a trial reverted for "outputs changed: exit status 0, baseline -11")."""
    t = trial(run("A", None, exit_code=-11, crashed="may be gitmd's: died of SIGSEGV"), run("B", 12.0))
    assert t.pairs() == [] and t.spoiled() == 1
    assert decide_trial(t, CONTRACT, 3, 0.03, 1.5, earlier_plain_s=[39.0, 41.0]) is None


def test_changed_outputs_end_the_trial_at_the_first_pair() -> None:
    moved = trial(run("A", 40.0), run("B", 12.0, 1.05))
    d = decide_trial(moved, CONTRACT, 3, 0.03, 1.5)
    assert d is not None and not d.promote and "outputs changed" in d.reason


def test_a_numerics_lever_without_numbers_compared_is_not_promoted_early() -> None:
    exit_only = Contract((Check("exit_status"),))
    d = decide_trial(trial(run("A", 40.0), run("B", 12.0)), exit_only, 3, 0.03, 1.5, [39.0, 41.0])
    assert d is not None and not d.promote and "compares numbers" in d.reason
    # a lever that cannot change numbers may stop early on the exit status alone
    d = decide_trial(
        trial(run("A", 40.0), run("B", 12.0), lever="cpu_threads"), exit_only, 3, 0.03, 1.5, [39.0, 41.0]
    )
    assert d is not None and d.promote


def test_run_noise_is_the_relative_spread_of_plain_runs() -> None:
    assert run_noise([10.0]) is None and run_noise([10.0, 10.01]) is None
    assert abs((run_noise([9.0, 10.0, 11.0]) or 0) - 0.2) < 1e-12


def test_a_launch_lever_clearly_slower_is_reverted_after_two_pairs() -> None:
    """Each losing run of a launch trial costs the workload a run: two pairs in which every B run is
    at least min_gain slower than every A run end the trial, not kept, before its three pairs."""
    slow = trial(
        run("A", 40.0), run("B", 48.0), run("B", 47.0), run("A", 40.5), lever="cuda_device_max_connections"
    )
    d = decide_trial(slow, CONTRACT, 3, 0.03, 1.5)
    assert d is not None and not d.promote and "stopped before 3 pairs" in d.reason
    assert (
        decide_trial(
            trial(run("A", 40.0), run("B", 48.0), lever="cuda_device_max_connections"), CONTRACT, 3, 0.03, 1.5
        )
        is None
    )  # one pair: more runs needed


def test_a_pair_timed_on_two_clocks_is_no_evidence() -> None:
    """A run timed by its launcher (it went without the shim) and one timed by the shim measure
    different spans (exec to exit; CUDA's start to the last exit): such a pair is spoiled, never
    compared; a trial's clock is its measured runs'."""
    a, b = run("A", 10.0), run("B", 2.0)
    b["clock"] = "wall_s"
    t = trial(a, b)
    assert t.pairs() == [] and t.spoiled() == 1 and t.clock() == "wall_s"
    c, d = run("B", 2.0), run("A", 10.0)
    c["clock"] = d["clock"] = "wall_s"
    t2 = trial(a, b, c, d)
    assert t2.pairs() == [(d, c)] and t2.spoiled() == 1
    assert trial(run("A", 10.0)).clock() == "run_s"  # recorded before the launcher's clock
    # whole pairs on two clocks in one trial (a program launched by gitmctl run and by a scheduler):
    # one decision takes the trial's clock, the latest measured run's; the other pair is spoiled
    e, f = run("A", 10.0), run("B", 2.0)
    t3 = trial(e, f, c, d)
    assert t3.pairs() == [(d, c)] and t3.spoiled() == 1


def test_a_pair_of_two_command_lines_is_no_evidence() -> None:
    """One workload, two command lines (--steps 1000 and --steps 100 fingerprint alike): their
    lengths differ by the work asked, so a pair of the two would promote the lever 10x. Runs that
    say their command line pair only with the same one; runs recorded before trials had one pair
    as before."""
    a, b = run("A", 100.0), run("B", 10.0)
    a["command"], b["command"] = "c1000", "c100"
    t = trial(a, b)
    assert t.pairs() == [] and t.spoiled() == 1
    assert decide_trial(t, CONTRACT, 1, 0.03, 1.5, earlier_plain_s=[99.0, 100.0, 101.0]) is None
    c, d = run("B", 9.0), run("A", 10.0)
    c["command"] = d["command"] = "c100"
    assert trial(a, b, c, d).pairs() == [(d, c)]
    assert trial(run("A", 10.0), run("B", 9.0)).spoiled() == 0  # no command recorded: as before


def test_a_pair_is_completed_by_a_run_of_its_own_command_line(tmp_path: Path) -> None:
    """LaunchTrials.assign: while a pair is half done, a launch of another command line gets no arm
    (uncounted while the pair's first run still runs, then counted); a run of the pair's line
    completes it, and the next pair may be of any line. MAX_SKIPPED launches of other lines leave
    the half pair's run unpaired (no evidence) and the last of them opens the next pair. Runs
    recorded before runs kept their line get it from the jobs table: an old trial's 30-s
    `--steps 300` arm was paired with a 10-s `--steps 100` one."""
    from gitmd.config import CaptureConfig
    from gitmd.experiments.runs import MAX_SKIPPED, LaunchTrials
    from gitmd.jobs.registry import JobRegistry, Registration
    from gitmd.levers.registry import make
    from gitmd.store.db import Store

    store = Store(tmp_path / "s.db")
    trials = LaunchTrials(store)
    assert trials.plan("w", make("tf32_override"), "fp32_gemm", 0.9, 4.0) is not None

    def arm(job_id: str, line: str) -> str:
        got = trials.assign("w", job_id, 0, line)
        assert got is not None
        return got[1]

    assert arm("j1", "c1") == "A"
    assert arm("j2", "c2") == "" and trials.running("w").skipped == 0  # j1 still runs: uncounted
    trials.finish_run("j1", 1, 30.0, 0, {})
    assert arm("j3", "c2") == "" and trials.running("w").skipped == 1
    assert arm("j4", "c1") == "B" and trials.running("w").skipped == 0  # the pair: c1 and c1
    assert arm("j5", "c2") == "B"  # the next pair (B A), on another line
    trials.finish_run("j4", 1, 29.0, 0, {})
    trials.finish_run("j5", 1, 10.0, 0, {})
    assert [arm(f"k{i}", "c1") for i in range(MAX_SKIPPED)] == [""] * (MAX_SKIPPED - 1) + ["B"]
    t = trials.running("w")
    assert t is not None and t.runs[2]["job_id"] == "j5" and "did not run again" in t.runs[2]["unpaired"]
    assert t.spoiled() == 1 and t.skipped == 0 and t.half() == t.runs[-1]
    from gitmctl.commands.library import _trial_run
    from gitmd.api.convert import trial_to_pb

    shown = trial_to_pb(t).runs[2]
    assert "did not run again" in shown.unpaired and _trial_run(shown) == "B:unpaired"  # library show
    trials.finish_run(f"k{MAX_SKIPPED - 1}", 1, 28.0, 0, {})
    assert arm("k9", "c1") == "A"
    trials.finish_run("k9", 1, 30.0, 0, {})
    t = trials.running("w")
    assert t is not None and [(a["run_s"], b["run_s"]) for a, b in t.pairs()] == [(30.0, 29.0), (30.0, 28.0)]
    trials.end(t, "abandoned", {})

    # a trial from before runs kept their command line: its done A run is a --steps 300 job's
    reg = JobRegistry(store, tmp_path / "run", CaptureConfig())
    old = reg.register(Registration("t", ("python", "t.py", "--steps", "300"), "/w", 0, 0, capture=False))[0]
    store.conn.execute(
        "INSERT INTO launch_trials (workload_id, lever, setting, cause, state, runs, created_ns, updated_ns) "
        "VALUES ('w', 'alloc_expandable_segments', '{}', 'allocator', 'running', ?, 1, 1)",
        [json.dumps([{"job_id": old.id, "arm": "A", "done": True, "run_s": 30.0}])],
    )
    store.conn.commit()
    from gitmd.jobs.launch_key import command_digest

    short = command_digest(("python", "t.py", "--steps", "100"), "/w")
    assert arm("n1", short) == ""  # not the B arm of a 30-s run
    assert trials.running("w").runs[0]["command"] == command_digest(old.command, old.cwd)


def test_a_pairs_first_run_that_crashed_waits_for_no_second(tmp_path: Path) -> None:
    """A pair's first run that died by a signal (or never started CUDA) can make no pair: it is left
    unpaired at once, and the next launch, of any command line, opens the pair again (it had made
    the next run of its line a wasted second run, and other lines wait)."""
    from gitmd.experiments.runs import LaunchTrials
    from gitmd.levers.registry import make
    from gitmd.store.db import Store

    trials = LaunchTrials(Store(tmp_path / "s.db"))
    t = trials.plan("w", make("cuda_device_max_connections"), "launch_bound", 0.5)
    assert t is not None
    assert trials.assign("w", "j1", 0, "c1") is not None
    trials.finish_run("j1", t.id, None, -11, {}, crashed="may be gitmd's: SIGSEGV")
    got = trials.assign("w", "j2", 0, "c2")
    assert got is not None and got[1] == "A" and got[0].runs[0]["unpaired"]
    assert got[0].spoiled() == 1 and got[0].half() == got[0].runs[1]


def test_pairs_of_several_command_lines_are_each_judged_by_their_own_line() -> None:
    """Pairs of two lines may decide together, but each by its own line: the spread an early stop
    needs is each pair's line's (a noisy line's 1.525x was promoted on a quiet line's 2% spread), a
    clearly slower lever is seen pair by pair (min B over max A across a 30-s and a 10-s line hid
    two pairs 20% slower), and a run left unpaired sets no clock."""

    def on(line: str, r: dict[str, Any]) -> dict[str, Any]:
        r["command"] = line
        return r

    noisy = trial(on("n", run("A", 30.5)), on("n", run("B", 19.0, 1.001)))
    spreads = {"n": [30.0, 24.0, 36.0], "q": [30.0, 30.01, 29.99]}
    assert decide_trial(noisy, CONTRACT, 3, 0.03, 1.5, earlier_plain_s=spreads) is None
    quiet_only = decide_trial(noisy, CONTRACT, 3, 0.03, 1.5, earlier_plain_s=spreads["q"])
    assert quiet_only is not None and quiet_only.promote  # what one list for every line did
    # a second pair on the quiet line (2.4x: the two disagree, no two-pair t interval): n's 40% holds
    both = trial(*noisy.runs, on("q", run("B", 12.5, 1.001)), on("q", run("A", 30.0)))
    assert decide_trial(both, CONTRACT, 3, 0.03, 1.5, earlier_plain_s=spreads) is None
    assert decide_trial(both, CONTRACT, 3, 0.03, 1.5, earlier_plain_s=spreads["q"]) is not None
    # each pair 20% slower, on a 30-s line and a 10-s line: stopped as clearly slower
    slower = trial(
        on("x", run("A", 30.0)), on("x", run("B", 36.0)), on("y", run("B", 12.0)), on("y", run("A", 10.0)),
        lever="cuda_device_max_connections",
    )  # fmt: skip
    d = decide_trial(slower, CONTRACT, 3, 0.03, 1.5)
    assert d is not None and not d.promote and "stopped before 3 pairs" in d.reason
    # a run left unpaired is no evidence: it does not set the trial's clock
    late = run("A", 9.0)
    late.update(clock="wall_s", unpaired="its command line did not run again")
    t = trial(run("A", 10.0), run("B", 8.0), late)
    assert t.clock() == "run_s" and len(t.pairs()) == 1 and t.spoiled() == 1


def test_one_pair_clearly_slower_beyond_the_measured_spread_stops_the_trial() -> None:
    """Each B arm of a losing lever costs the job a run: with the line's spread measured, the first
    pair slower beyond three times it stops the trial (not kept); within it, or with no spread
    measured, more pairs are needed."""
    lever = "cuda_device_max_connections"
    slow = trial(run("A", 40.0), run("B", 48.0), lever=lever)  # 20% slower
    d = decide_trial(slow, CONTRACT, 3, 0.03, 1.5, earlier_plain_s=[39.8, 40.2, 40.1])
    assert d is not None and not d.promote and "stopped after 1 of 3 pairs" in d.reason
    assert d.interval is not None and d.interval.low < 40 / 48 < d.interval.high < 1  # a real interval
    assert (
        decide_trial(slow, CONTRACT, 3, 0.03, 1.5, earlier_plain_s=[36.0, 40.0, 44.0]) is None
    )  # 20% spread
    assert decide_trial(slow, CONTRACT, 3, 0.03, 1.5) is None  # no spread measured
    assert (
        decide_trial(slow, CONTRACT, 3, 0.03, 0.0, earlier_plain_s=[39.8, 40.2, 40.1]) is not None
    )  # early stops off: still stops


def test_the_one_pair_slower_stop_needs_its_interval_clear_of_no_effect() -> None:
    """A review: with a line spread 18% (plain runs 10 and 12 s, A 11 s), one pair at 17.02 s was
    stopped as slower with its interval (0.41-1.03) still holding no effect. The stop now also needs
    the interval's top below 1 / (1 + min_gain); a pair 3.1% slower on a 0.5% spread no longer stops
    it either (a single pair, in one order, cannot cancel a drift)."""
    lever = "cuda_device_max_connections"
    wide = trial(run("A", 11.0), run("B", 17.02), lever=lever)
    assert decide_trial(wide, CONTRACT, 3, 0.03, 1.5, earlier_plain_s=[10.0, 12.0]) is None
    tight = trial(run("A", 40.0), run("B", 41.24), lever=lever)
    assert decide_trial(tight, CONTRACT, 3, 0.03, 1.5, earlier_plain_s=[39.9, 40.1, 40.05]) is None


def test_the_slower_stop_reads_the_wider_of_its_spreads_and_a_promotion_never_the_observed_one() -> None:
    """slower_plain_s (the line's runs with the shim too, on the launcher's clock) gives the one-pair
    slower stop a spread where the plain runs have none; where both exist, the wider is read. A
    promotion reads only the plain runs' spread: observed runs never make a gain look surer."""
    lever = "cuda_device_max_connections"
    slow = trial(run("A", 40.0), run("B", 48.0), lever=lever)  # 20% slower
    observed = [39.8, 40.2]
    d = decide_trial(slow, CONTRACT, 3, 0.03, 1.5, slower_plain_s=observed)
    assert d is not None and not d.promote and "stopped after 1 of 3 pairs" in d.reason
    # the plain runs' spread is the wider (20%): it decides, and 20% slower is within 3 x that
    assert decide_trial(slow, CONTRACT, 3, 0.03, 1.5, [36.0, 40.0, 44.0], slower_plain_s=observed) is None
    # the observed runs' spread is the wider: it decides
    assert decide_trial(slow, CONTRACT, 3, 0.03, 1.5, [39.8, 40.2], slower_plain_s=[36.0, 44.0]) is None
    # a gain one pair would promote on a 1% plain spread: not on the observed runs alone
    fast = trial(run("A", 40.0), run("B", 12.0, 1.001))
    assert decide_trial(fast, CONTRACT, 3, 0.03, 1.5, slower_plain_s=[39.8, 40.2]) is None
    assert decide_trial(fast, CONTRACT, 3, 0.03, 1.5, [39.8, 40.2], slower_plain_s=[39.8, 40.2]) is not None
