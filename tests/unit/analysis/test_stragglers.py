"""The ranks stepping together in a window and the one the others wait for: a real capture of two
DDP ranks (gloo, H200) and a constructed NCCL data-parallel step with a planted slow rank."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from gitmd.analysis.report import ProcessReport, analysed, window_report
from gitmd.analysis.stragglers import RankStep, last_arrivals, rank_steps, straggler
from gitmd.capture import capture_file
from tests.unit.analysis.test_breakdown import decoded, recs

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "h200-2026-12-04"
US = 1000
NAMES = {1: "sm90_xmma_gemm_f32f32_tf32f32", 2: "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgs)"}


def test_two_gloo_ranks_on_the_h200_are_one_step_and_rank_0_is_the_one_waited_for() -> None:
    """Real: `torchrun --nproc-per-node 2` of tests/gpu/programs/ddp_gloo.py under gitmd on the H200
    (2026-12-04): both ranks step every ~2.75 ms. Rank 0, the root of each step's broadcast, spends
    0.28 ms a step more between launches; the other rank waits as much more in its syncs."""
    rep = window_report(capture_file.loads(FIXTURES / "ddp-gloo-2ranks.npz"), tester=None)
    assert len(rep.ranks) == 2
    a, b = rep.ranks
    assert abs(a.step_ms - b.step_ms) < 0.01 * a.step_ms and 2.5 < a.step_ms < 3.0
    s = rep.straggler
    assert s is not None and s.pid == a.pid and 0.05 < s.share < 0.2 and "between launches" in s.why
    assert a.sync_ms < b.sync_ms  # the other rank's wait


def nccl_rank(pid: int, compute_us: int, steps: int = 12, step_us: int = 10_000) -> ProcessReport:
    """A constructed data-parallel rank: each step its GEMMs for ``compute_us``, then the all-reduce to
    the step's end (NCCL's kernel spins until the slowest peer arrives)."""
    spans, names = [], []
    for i in range(steps):
        t = i * step_us * US
        spans += [(t, t + compute_us * US), (t + compute_us * US, t + step_us * US)]
        names += [1, 2]
    d = dataclasses.replace(decoded(kernels=recs("kernels", spans, name_id=names)), names=NAMES)
    st, b, _ = analysed(d)
    return ProcessReport(pid, b, st, [])


def ranks_of(procs: list[ProcessReport]) -> list[RankStep]:
    """rank_steps with each process's breakdown as its breakdown over its run of steps (the
    constructed ranks have nothing outside their steps)."""
    return rank_steps(procs, {p.pid: p.breakdown for p in procs})


def test_the_rank_with_more_compute_a_step_is_the_straggler() -> None:
    procs = [nccl_rank(10, 5_000), nccl_rank(11, 8_000), nccl_rank(12, 5_200)]
    ranks = ranks_of(procs)
    assert [r.pid for r in ranks] == [10, 11, 12]
    assert all(abs(r.step_ms - 10.0) < 1e-6 for r in ranks)
    slow = next(r for r in ranks if r.pid == 11)
    assert abs(slow.compute_ms - 8.0) < 1e-6 and abs(slow.communication_ms - 2.0) < 1e-6
    s = straggler(ranks)
    assert s is not None and s.pid == 11 and abs(s.lag_ms - 2.9) < 1e-6 and abs(s.share - 0.29) < 1e-6
    assert s.why.startswith("its kernels take 2.900 ms more a step")
    # step by step: its all-reduce started last in every step (all of them end together)
    spans = {10: coll(5_000), 11: coll(8_000), 12: coll(5_200)}
    last, n = last_arrivals(spans)
    assert n == 12 and last == {10: 0, 11: 12, 12: 0}
    assert straggler(ranks, (last, n)).last_arrivals == 12  # type: ignore[union-attr]
    # a rank whose window missed the first collective: the others' first is not compared
    partial = {10: coll(5_000), 11: coll(8_000)[1:]}
    assert last_arrivals(partial) == ({10: 0, 11: 11}, 11)
    assert last_arrivals({10: coll(5_000)}) == ({}, 0)  # one rank
    assert last_arrivals({10: coll(5_000), 11: np.zeros((0, 2), dtype=np.int64)}) == ({}, 0)


def coll(compute_us: int, steps: int = 12, step_us: int = 10_000) -> np.ndarray:
    """A rank's all-reduces, (start, end) ns: from its compute's end to the step's end."""
    return np.array([(i * step_us * US + compute_us * US, (i + 1) * step_us * US) for i in range(steps)])


def test_balanced_ranks_and_single_processes_name_no_straggler() -> None:
    assert straggler(ranks_of([nccl_rank(10, 5_000), nccl_rank(11, 5_200)])) is None  # 2% apart
    assert ranks_of([nccl_rank(10, 5_000)]) == []  # one process: no ranks
    # same kernels per step, steps 2x apart: two runs of one script, not ranks stepping together
    assert ranks_of([nccl_rank(10, 5_000), nccl_rank(11, 5_000, step_us=20_000)]) == []
    assert straggler([RankStep(1, 10.0, 5.0, 5.0, 0.0, 0.0, 0.0)]) is None


def test_explain_shows_the_ranks_and_the_straggler(capsys: object) -> None:
    """What `gitmctl explain` prints from the API's message (ExplainCapture and GetAttribution)."""
    from gitmctl.commands.explain import show_ranks
    from gitmd.api.convert import attribution_to_pb

    rep = window_report(capture_file.loads(FIXTURES / "ddp-gloo-2ranks.npz"), tester=None)
    msg = attribution_to_pb(rep)
    assert len(msg.ranks) == 2 and msg.HasField("straggler") and msg.straggler.pid == rep.ranks[0].pid
    show_ranks(msg)
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "ranks stepping together (2)" in out and f"straggler: pid {rep.ranks[0].pid}" in out
    one = dataclasses.replace(rep, ranks=[], straggler=None)
    show_ranks(attribution_to_pb(one))
    assert capsys.readouterr().out == ""  # type: ignore[attr-defined]


def test_an_ended_jobs_stored_report_keeps_its_ranks() -> None:
    from gitmd.analysis import report_codec

    rep = window_report(capture_file.loads(FIXTURES / "ddp-gloo-2ranks.npz"), tester=None)
    back = report_codec.loads(report_codec.dumps(rep))
    assert back.ranks == rep.ranks and back.straggler == rep.straggler


def test_a_distributed_jobs_causes_are_its_stragglers() -> None:
    """The others wait for the straggler, so the job's causes are its: with rank 0's last 20
    kernels dropped (after its run of steps) the other rank launched the most kernels, and the
    causes stay rank 0's."""
    w = capture_file.loads(FIXTURES / "ddp-gloo-2ranks.npz")
    rep = window_report(w, tester=None)
    assert rep.straggler is not None and rep.cause_pid == rep.straggler.pid
    slow = rep.straggler.pid
    procs = []
    for p in w.processes:
        if p.pid == slow:
            k = p.records.kernels
            k = k[np.argsort(k["start_ns"])][:-20]
            p = dataclasses.replace(p, records=dataclasses.replace(p.records, kernels=k))
        procs.append(p)
    fewer = dataclasses.replace(w, processes=procs)
    counts = {p.pid: len(p.records.kernels) for p in fewer.processes}
    assert max(counts, key=lambda pid: counts[pid]) != slow  # no longer the busiest
    again = window_report(fewer, tester=None)
    assert again.straggler is not None and again.straggler.pid == slow and again.cause_pid == slow


def test_exposed_collectives_are_a_cause_no_lever_acts_on() -> None:
    """A rank whose all-reduce is half its step (nothing beside it) has `communication` above
    threshold, its evidence in plain words, and no lever: NCCL's tuning variables are its
    documentation's "Debugging" ones, never kept as a policy. A process with no collective has no
    such cause."""
    from gitmd.analysis.causes import LEVERS, rank

    spans, names = [], []
    for i in range(12):
        t = i * 10_000 * US
        spans += [(t, t + 5_000 * US), (t + 5_000 * US, t + 10_000 * US)]
        names += [1, 2]
    d = dataclasses.replace(decoded(kernels=recs("kernels", spans, name_id=names)), names=NAMES)
    _, b, r = analysed(d)
    (c,) = [c for c in rank(b, r, None, None, None, None, []) if c.name == "communication"]
    assert c.above_threshold and 0.45 < c.share < 0.55 and c.levers == () == LEVERS["communication"]
    assert "12 collective kernels" in c.evidence[0] and "hidden under compute" in c.evidence[0]
    assert "Debugging" in c.evidence[1] and "keeps none" in c.evidence[1]
    gemms = dataclasses.replace(decoded(kernels=recs("kernels", spans[::2], name_id=[1] * 12)), names=NAMES)
    _, b, r = analysed(gemms)
    assert not [c for c in rank(b, r, None, None, None, None, []) if c.name == "communication"]
