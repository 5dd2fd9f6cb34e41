from __future__ import annotations

import numpy as np

from gitmd.capture import payloads
from gitmd.capture.abi import load
from gitmd.capture.decode import decode


def test_scalars_and_samples_from_payload_records() -> None:
    a = load()
    rec = np.zeros(4, dtype=a.payloads[a.const("GITM_REC_PAYLOAD")])
    rec["type"] = a.const("GITM_REC_PAYLOAD")
    rec["seq"] = np.arange(4)
    rec["start_ns"] = [40, 10, 30, 20]  # out of order: samples come back in time order
    rec["correlation_id"] = [4, 1, 3, 2]
    rec["device"] = [a.const("GITM_PAYLOAD_ASYNC_COPY")] * 3 + [a.const("GITM_PAYLOAD_SYNC_COPY")]
    values = np.array([4.5, 1.5, 3.5], dtype="<f4")
    for i, v in enumerate(values):
        rec["data"][i, :4] = np.frombuffer(v.tobytes(), dtype=np.uint8)
        rec["flags"][i] = 4
    rec["data"][3, :8] = np.frombuffer(np.float64(2.25).tobytes(), dtype=np.uint8)
    rec["flags"][3] = 8
    d = decode(rec.view(np.uint8).reshape(-1, 64).copy())
    assert payloads.scalars(d, "<f4").tolist() == [1.5, 3.5, 4.5]
    assert payloads.scalars(d, "<f8").tolist() == [2.25]
    s = payloads.samples(d)
    assert [x.correlation_id for x in s] == [1, 2, 3, 4]
    assert s[1].source == "sync copy" and len(s[1].data) == 8 and s[0].source == "async copy"


def test_real_capture_of_item_reads() -> None:
    """tests/gpu/programs/torch_item.py on the H200: 50 .item() reads of 6 * (step + 0.5)."""
    from pathlib import Path

    from gitmd.capture import capture_file

    w = capture_file.loads(
        Path(__file__).resolve().parents[2] / "fixtures" / "capture-torch-item-payloads.npz"
    )
    r = w.processes[0].records
    assert payloads.scalars(r, "<f4").tolist() == [6 * (s + 0.5) for s in range(50)]
    assert {s.source for s in payloads.samples(r)} == {"async copy"}  # cudaMemcpyAsync + stream sync
