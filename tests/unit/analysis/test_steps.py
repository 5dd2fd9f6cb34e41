from pathlib import Path

import numpy as np
import pytest

from gitmd.analysis.steps import detect
from gitmd.capture import capture_file

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def synthetic(
    step: list[int],
    steps: int,
    step_ns: int,
    extra_every: int = 0,
    extra: list[int] | None = None,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids, starts, t = [], [], 0
    for i in range(steps):
        if extra_every and i and i % extra_every == 0 and extra:
            for e in extra:  # evaluation/logging work between two steps
                ids.append(e)
                starts.append(t)
                t += 50_000
        for j, kid in enumerate(step):
            ids.append(kid)
            starts.append(t + j * (step_ns // len(step)))
        t += int(step_ns * (1 + 0.02 * rng.standard_normal()))
    return np.array(ids), np.array(starts)


def test_real_h200_training_window() -> None:
    w = capture_file.loads(FIXTURES / "capture-torch-train.npz")
    k = w.processes[0].records.kernels
    s = detect(k["name_id"], k["start_ns"])
    assert s.found, s.reason
    assert s.period_kernels == 24  # 3 linears + GELUs + loss forward, backward, SGD
    assert 150 <= s.steps <= 160
    assert 1.0e6 < s.p10_ns <= s.median_ns <= s.p90_ns < 3.0e6
    assert s.self_match > 0.95 and s.confidence > 0.9


def test_extra_work_does_not_move_the_median() -> None:
    step = [1, 2, 3, 4, 2, 5, 6, 1, 7]
    ids, starts = synthetic(step, 200, 2_000_000, extra_every=10, extra=[90, 91, 92, 1, 2, 93])
    s = detect(ids, starts)
    assert s.found and s.period_kernels == len(step)
    assert abs(s.median_ns - 2_000_000) < 0.02 * 2_000_000
    assert s.p90_ns > s.median_ns  # the steps with evaluation are longer, and counted
    assert s.steps >= 150


def test_names_that_run_twice_per_step_do_not_halve_the_period() -> None:
    # most names run twice a step: the most common count is 2 x steps
    step = [1, 2, 3, 1, 2, 4, 5, 6, 5, 6, 7]
    ids, starts = synthetic(step, 100, 1_000_000)
    s = detect(ids, starts)
    assert s.found and s.period_kernels == len(step), s
    assert abs(s.median_ns - 1_000_000) < 0.03 * 1_000_000


def test_no_period_says_so() -> None:
    rng = np.random.default_rng(3)
    ids = rng.integers(1, 40, size=3000)
    s = detect(ids, np.arange(3000) * 1000)
    assert not s.found and "does not repeat" in s.reason and s.confidence == 0
    s = detect(np.array([1, 2, 3]), np.array([1, 2, 3]))
    assert not s.found and "only 3 kernels" in s.reason
    s = detect(np.arange(100), np.arange(100))
    assert not s.found and "repeats often enough" in s.reason


def test_unsorted_input_is_sorted_by_start() -> None:
    ids, starts = synthetic([1, 2, 3, 4], 50, 1_000_000)
    perm = np.random.default_rng(0).permutation(len(ids))
    a, b = detect(ids, starts), detect(ids[perm], starts[perm])
    assert a == b and a.found


def test_job_steps_from_a_real_window_and_its_api_message() -> None:
    from gitmd.analysis.steps import job_steps
    from gitmd.api import convert

    w = capture_file.loads(FIXTURES / "capture-torch-train.npz")
    js = job_steps(w)
    assert js is not None and js.stats.found and js.pid == w.processes[0].pid
    assert js.anchor_kernel  # a real, demangled kernel name
    msg = convert.steps_to_pb(js)
    assert msg.found and msg.period_kernels == 24 and 1.0 < msg.median_ms < 3.0
    assert msg.p10_ms <= msg.median_ms <= msg.p90_ms and msg.window_id == w.window_id
    torch_kw = capture_file.loads(FIXTURES / "capture-torch-known-work.npz")
    main = job_steps(torch_kw)
    assert (
        main is not None
        and len(next(p for p in torch_kw.processes if p.pid == main.pid).records.kernels) == 500
    )


def test_time_per_step_of_a_job_queueing_ahead_is_its_kernels_rate() -> None:
    """Real H200 windows. A bf16 GEMM job that queues 50 steps ahead of its GPU has only the kernels
    launched while the window was open recorded, run back to back in a tenth of the window: its
    time per step is their span over the steps (two windows of the same job: 1.77 and 1.67 ms, the
    detected step 1.71 and 1.57), not the window's length over them (15.2 and 18.4 ms, a fifth
    apart for the same job). In every planted case the time per step is the mean over the recorded
    run of steps: never less than the median step (a lost time slice counts), never more than the
    window's length over its steps (which counts the ~330 ms CUPTI records nothing)."""
    from pathlib import Path

    from gitmd.analysis.steps import job_steps, time_per_step_ms
    from gitmd.capture import capture_file

    planted = Path(__file__).resolve().parents[2] / "fixtures" / "planted"
    for case in (
        "bf16-n8192",
        "sync-n3072",
        "launch-1k",
        "cpu-hog",
        "pageable-64mb",
        "cotenant",
        "alloc-cap6",
    ):
        for w_name in ("w1", "w2"):
            w = capture_file.loads(planted / f"{case}.{w_name}.npz")
            steps = job_steps(w)
            assert steps is not None and steps.stats.found, case
            got = time_per_step_ms(w, steps)
            over_window = (w.end_real_ns - w.start_real_ns) / 1e6 / steps.stats.steps
            assert got is not None
            median = steps.stats.median_ns / 1e6
            if case == "bf16-n8192":
                assert 0.9 < got / median < 1.15 and got < over_window / 5
            else:
                assert 0.95 * median <= got <= over_window, case
    # contention shows: a co-tenant's and a CPU hog's second windows, a lost slice in many steps
    for case in ("cotenant", "cpu-hog"):
        w = capture_file.loads(planted / f"{case}.w2.npz")
        steps = job_steps(w)
        assert steps is not None
        got = time_per_step_ms(w, steps)
        assert got is not None and got > 2 * steps.stats.median_ns / 1e6, case
    assert time_per_step_ms(w, None) is None


H200_MLP = Path(__file__).resolve().parents[2] / "fixtures" / "h200-2026-12-04"


@pytest.mark.parametrize("name", ["mlp-fp32.run1.w5", "mlp-fp32.run2.w17", "mlp-fp32.run2.w18"])
def test_a_windows_stray_record_is_not_one_of_its_steps(name: str) -> None:
    """Real H200 windows of an fp32 MLP (9.93-ms steps back to back, tests/gpu/test_launch_trials.py,
    2026-12-04): CUPTI recorded nothing for ~330 ms after each window opened, and one lone kernel
    came with three of them, 3.1 s or 0.2 s before the window opened or 42 ms before the next
    record. The recorded run of steps starts after it: time per step is the job's step, not the
    window's length over its steps (~29 ms), nor stretched by the stray kernel."""
    from gitmd.analysis.steps import job_steps, steady_span, time_per_step_ms
    from gitmd.capture import capture_file

    w = capture_file.loads(H200_MLP / f"{name}.npz")
    steps = job_steps(w)
    assert steps is not None and steps.stats.found and steps.stats.period_kernels == 25
    got = time_per_step_ms(w, steps)
    assert got is not None and abs(got / 9.93 - 1) < 0.01, got
    span = steady_span(steps.stats)
    k = w.processes[0].records.timed().kernels
    assert span is not None and span[0] > int(k["start_ns"].min())  # the stray kernel is left out
    over_window = (w.end_real_ns - w.start_real_ns) / 1e6 / steps.stats.steps
    assert over_window > 2.5 * got


def test_a_window_across_two_phases_finds_the_step_at_its_next_most_common_count() -> None:
    """A real H200 window of timm's train.py (AMP ResNet on an image folder, corpus program
    timm-train-imagefolder-amp, 2026-12-04, tests/fixtures/h200-2026-12-04): 6912 kernels of 130
    names over 2 s, most names 4 times (the phase around the epoch's end), while the training step
    repeats every 447 kernels. The most common count gave no repeating anchor ("self-match 0.01 at 2
    kernels"); the next counts are tried and the step is found."""
    from gitmd.analysis.steps import job_steps

    w = capture_file.loads(H200_MLP / "timm-imagefolder-amp.train-and-eval.npz")
    steps = job_steps(w)
    assert steps is not None and steps.stats.found, steps.stats.reason if steps else None
    assert steps.stats.period_kernels == 447 and steps.stats.self_match >= 0.6 and steps.stats.steps >= 5


def test_a_stray_anchor_a_period_before_the_steps_is_not_a_step() -> None:
    """A lone anchor record from before CUPTI's silent start, followed by about one period of kernels
    (the rest of its step was not recorded), has a regular kernel count and a recording gap for a
    time: the window's first and last steps count only when no longer than EDGE_STEPS median steps."""
    from gitmd.analysis.steps import EDGE_STEPS, steady_span

    period, steps = 5, 20
    names = np.tile(np.arange(period), steps)
    starts = np.arange(period * steps, dtype=np.int64) * 1_000_000  # 1 ms a kernel, 5 ms a step
    # the stray: one anchor 1 s before, then the last four kernels of its step
    stray_names = np.array([0, 1, 2, 3, 4])
    stray_starts = np.array([-1_000_000_000, -4_000_000, -3_000_000, -2_000_000, -1_000_000]) - 1_000_000
    st = detect(np.concatenate([stray_names, names]), np.concatenate([stray_starts, starts]))
    assert st.found and st.period_kernels == period
    span = steady_span(st)
    assert span is not None and span[0] >= -5_000_000  # the 1-s "step" is not in the span
    assert (span[1] - span[0]) / st.span_steps < EDGE_STEPS * 5_000_000
