from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from gitmd.analysis.breakdown import breakdown
from gitmd.capture import capture_file
from gitmd.capture.abi import load
from gitmd.capture.decode import Decoded

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def recs(kind: str, spans: list[tuple[int, int]], **fields: object) -> np.ndarray:
    a = load()
    code = {"kernels": 1, "memcpys": 2, "memsets": 3, "syncs": 4, "memory": 5}[kind]
    out = np.zeros(len(spans), dtype=a.payloads[code])
    out["type"] = code
    for i, (s, e) in enumerate(spans):
        out["start_ns"][i], out["end_ns"][i] = s, e
    for k, v in fields.items():
        out[k] = v
    return out


def decoded(**kinds: np.ndarray) -> Decoded:
    empty = {k: recs(k, []) for k in ("kernels", "memcpys", "memsets", "syncs", "memory")}
    a = load()
    none = np.zeros(0, dtype=a.payloads[8])
    return Decoded(
        **{**empty, **kinds},
        clocks=none,
        windows=np.zeros(0, dtype=a.payloads[9]),
        payloads=np.zeros(0, dtype=a.payloads[7]),
    )


def test_exact_split_of_a_constructed_window() -> None:
    # times in ns; gaps farther apart than the 20 µs window in which an event "causes" a gap.
    # kernels 0-100 and 50-200 µs overlap (busy 0-200); copy 300-400; kernel 600-700; window 0-1000 µs
    us = 1000
    d = decoded(
        kernels=recs("kernels", [(0, 100 * us), (50 * us, 200 * us), (600 * us, 700 * us)]),
        memcpys=recs("memcpys", [(300 * us, 400 * us)], src_kind=1, dst_kind=3, bytes=1 << 20, copy_kind=1),
        syncs=recs("syncs", [(150 * us, 200 * us)]),  # returns as the GPU goes idle at 200 µs
        memory=recs("memory", [(400 * us, 400 * us)], op=1),  # an allocation as the copy ends
    )
    b = breakdown(d, window=(0, 1000 * us))
    assert b.kernels_ns == 300 * us and b.copies_ns == 100 * us
    assert b.sync_stall_ns == 100 * us  # gap 200-300 follows the sync
    assert b.allocator_ns == 200 * us  # gap 400-600 follows the allocation
    assert b.launch_gap_ns == 300 * us  # gap 700-1000
    assert sum(b.shares().values()) == 1.0
    assert b.pageable_copies == 1 and b.pageable_ns == 100 * us
    assert b.pageable_saving_ns == 100 * us - round((1 << 20) / 54.9e9 * 1e9)  # no pinned copy: H200 default


def test_real_captures() -> None:
    w = capture_file.loads(FIXTURES / "capture-cuda-known-work.npz")
    b = breakdown(w.processes[0].records)
    parts = b.kernels_ns + b.copies_ns + b.sync_stall_ns + b.allocator_ns + b.launch_gap_ns
    assert parts == b.window_ns
    assert b.pageable_copies == 10 and b.pageable_bytes == 10 * (4 << 20)
    # measured from this capture's own pinned copies, not assumed
    assert 30e9 < b.pinned_bytes_per_s < 80e9 and b.pageable_saving_ns > 0.5 * b.pageable_ns
    child = min(
        (
            p
            for p in capture_file.loads(FIXTURES / "capture-torch-known-work.npz").processes
            if len(p.records.kernels)
        ),
        key=lambda p: len(p.records.kernels),
    )
    c = breakdown(child.records)
    assert c.shares()["launch_gaps"] > 0.5  # 300 tiny multiplies: launch-bound


def test_empty_records() -> None:
    b = breakdown(decoded())
    assert b.window_ns == 0 and b.kernels == 0
    b = breakdown(dataclasses.replace(decoded()), window=(0, 1000))
    assert b.launch_gap_ns == 1000


def test_window_report_and_its_api_message() -> None:
    from gitmd.analysis.report import CLASSES, window_report
    from gitmd.api.convert import attribution_to_pb

    w = capture_file.loads(FIXTURES / "capture-torch-known-work.npz")
    rep = window_report(w, top=2)
    assert {p.pid for p in rep.processes} == {p.pid for p in w.processes if len(p.records.kernels)}
    msg = attribution_to_pb(rep)
    assert msg.job_id == w.job_id and len(msg.processes) == len(rep.processes)
    for p in msg.processes:
        assert [c.name for c in p.classes] == list(CLASSES)
        assert abs(sum(c.share for c in p.classes) - 1.0) < 1e-9
        assert len(p.top_kernels) == 1 and p.top_kernels[0].share == 1.0  # one kernel kind per process
        assert p.step.found and p.step.pid == p.pid


def test_refill_after_a_sync_is_the_syncs_up_to_the_time_the_host_was_blocked() -> None:
    us = 1000
    d = decoded(
        kernels=recs(
            "kernels", [(0, 100 * us), (150 * us, 160 * us), (200 * us, 210 * us), (300 * us, 310 * us)]
        ),
        syncs=recs("syncs", [(10 * us, 100 * us)]),  # the host waited 90 µs for the GPU
    )
    b = breakdown(d, window=(0, 310 * us))
    # 100-150 starts as the sync returns; 160-200 is refill within the 90 µs the host lost;
    # 210-300 would exceed it: the host is simply slower than the GPU there
    assert b.sync_stall_ns == 90 * us and b.launch_gap_ns == 90 * us


def test_records_without_timestamps_are_left_out_of_timing() -> None:
    us = 1000
    d = decoded(
        kernels=recs("kernels", [(100 * us, 200 * us)]),
        memsets=recs("memsets", [(0, 0), (150 * us, 160 * us)]),  # CUPTI gave the first no timestamps
    )
    t = d.timed()
    assert len(t.memsets) == 1 and len(t.kernels) == 1
    b = breakdown(t)
    assert b.window_ns == 100 * us and b.launch_gap_ns == 0


def test_the_window_sees_the_gpu_from_its_first_recorded_work() -> None:
    """A window records the work launched while it is open. A job that queues many steps and then
    synchronizes (the bf16 control on the H200) opens its window with the host blocked on work
    launched before it, which the GPU runs unrecorded: until the first recorded GPU work starts, the
    GPU's state is unknown and is left out, not counted as idle; the refill after the sync is still
    the sync's, and idle after the first recorded work is counted as before."""
    us = 1000
    kernels = recs("kernels", [(420 * us, 900 * us)])  # launched as the sync returned at 400 µs
    d = decoded(
        kernels=kernels, syncs=recs("syncs", [(0, 400 * us)]), memory=recs("memory", [(5 * us, 6 * us)], op=1)
    )
    b = breakdown(d)
    assert b.window_ns == 480 * us and b.kernels_ns == 480 * us
    assert b.sync_stall_ns == 0 and b.launch_gap_ns == 0 and b.allocator_ns == 0
    assert breakdown(d, window=(0, 1000 * us)).window_ns == 580 * us
    b = breakdown(d, window=(0, 1000 * us))
    assert b.launch_gap_ns + b.sync_stall_ns == 100 * us  # after the last recorded work: observed idle
    # a sync after the first recorded work waits for recorded work: the old split stands
    later = decoded(
        kernels=recs("kernels", [(0, 100 * us), (420 * us, 900 * us)]), syncs=recs("syncs", [(0, 400 * us)])
    )
    b = breakdown(later)
    assert b.window_ns == 900 * us and b.sync_stall_ns == 320 * us


def test_collectives_exposed_and_overlapped() -> None:
    """A data-parallel step: NCCL's all-reduce runs partly beside the backward kernels (overlapped,
    hidden under compute) and partly alone (exposed communication, a class of its own); a copy beside
    the exposed part stays communication's. The shares still sum to the window."""
    us = 1000
    names = {
        1: "sm90_xmma_gemm_f32f32_tf32f32",
        2: "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    }
    d = dataclasses.replace(
        decoded(
            # compute 0-300; all-reduce 200-500 (100 us under compute, 200 alone); compute 600-700
            kernels=recs(
                "kernels", [(0, 300 * us), (200 * us, 500 * us), (600 * us, 700 * us)], name_id=[1, 2, 1]
            ),
            memcpys=recs(
                "memcpys", [(400 * us, 450 * us)], src_kind=3, dst_kind=3, bytes=1 << 20, copy_kind=8
            ),
        ),
        names=names,
    )
    b = breakdown(d, window=(0, 1000 * us))
    assert b.kernels_ns == 400 * us  # compute only
    assert b.communication_ns == 200 * us and b.overlapped_comm_ns == 100 * us and b.collectives == 1
    assert b.copies_ns == 0  # the copy ran beside the all-reduce: GPU time already counted
    assert b.launch_gap_ns == 400 * us  # 500-600 and 700-1000
    assert abs(sum(b.shares().values()) - 1.0) < 1e-12 and b.shares()["communication"] == 0.2
    # one GPU, no collective: the breakdown as it always was
    alone = dataclasses.replace(d, names={1: names[1], 2: "void at::native::vectorized_elementwise_kernel"})
    b1 = breakdown(alone, window=(0, 1000 * us))
    assert b1.communication_ns == 0 and b1.collectives == 0 and b1.kernels_ns == 600 * us


def test_a_record_from_before_the_window_opened_is_not_its_own() -> None:
    """A real H200 window (tests/fixtures/h200-2026-12-04, run1.w5) delivered one kernel that ran
    3.1 s before the window's open marker; with no step to bound it, the breakdown covers the window
    from its opening on, not from that kernel (3.67 s, 94% of it a "launch gap")."""
    from gitmd.analysis.breakdown import opened_at
    from gitmd.analysis.report import analysed

    w = capture_file.loads(
        Path(__file__).resolve().parents[2] / "fixtures" / "h200-2026-12-04" / "mlp-fp32.run1.w5.npz"
    )
    r = w.processes[0].records.timed()
    opened = opened_at(r)
    assert opened is not None and int(r.kernels["start_ns"].min()) < opened - 3_000_000_000
    k = r.kernels.copy()
    k["name_id"] = np.arange(len(k))  # every kernel its own name: no step found
    st, b, _ = analysed(dataclasses.replace(r, kernels=k))
    assert not st.found
    assert b.window_ns < 600_000_000 and b.launch_gap_ns < 0.05 * b.window_ns
    assert b.kernels_ns <= b.window_ns  # the stale kernel ran outside it
