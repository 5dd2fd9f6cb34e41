"""Capture files: one window's raw records per process (compressed npz), for offline analysis and
test fixtures. Loaded with allow_pickle=False and every array checked: a capture file is input
like any other and may be hostile.
"""

from __future__ import annotations

import dataclasses
import io
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from gitmd.capture.abi import Abi, load
from gitmd.capture.context import GPU_DTYPE, HOST_DTYPE, WindowContext
from gitmd.capture.decode import Decoded
from gitmd.capture.ring import RingStatus
from gitmd.capture.windows import ProcessWindow, WindowResult

FORMAT = "gitm-capture"
VERSION = 2  # 2: the window context (host and GPU series); 1 is read with an empty one
_KINDS = {
    "kernels": "GITM_REC_KERNEL",
    "memcpys": "GITM_REC_MEMCPY",
    "memsets": "GITM_REC_MEMSET",
    "syncs": "GITM_REC_SYNC",
    "memory": "GITM_REC_MEMORY",
    "clocks": "GITM_REC_CLOCK",
    "windows": "GITM_REC_WINDOW",
    "payloads": "GITM_REC_PAYLOAD",
    "hostsrcs": "GITM_REC_HOSTSRC",
}
_OPTIONAL = frozenset({"hostsrcs"})  # absent from captures written before they existed
MAX_PROCESSES = 4096


class CaptureFileError(ValueError):
    """Not a capture file this gitmd can read; the message says why."""


def dumps(w: WindowResult) -> bytes:
    arrays: dict[str, np.ndarray] = {}
    procs = []
    for i, p in enumerate(w.processes):
        for kind in _KINDS:
            arrays[f"p{i}_{kind}"] = np.ascontiguousarray(getattr(p.records, kind)).view(np.uint8).reshape(-1)
        arrays[f"p{i}_clock_pairs"] = np.ascontiguousarray(p.clock_pairs).view(np.uint8).reshape(-1)
        procs.append({"pid": p.pid, "status": dataclasses.asdict(p.status), "names": p.records.names})
    c = w.context
    arrays["ctx_host"] = np.ascontiguousarray(c.host).view(np.uint8).reshape(-1)
    arrays["ctx_gpu"] = np.ascontiguousarray(c.gpu).view(np.uint8).reshape(-1)
    meta = {
        "context": {
            "interval_s": c.interval_s,
            "cores": list(c.cores),
            "gpus": list(c.gpus),
            "main_tid": c.main_tid,
            "notes": list(c.notes),
        },
        "format": FORMAT,
        "version": VERSION,
        "abi_version": load().version,
        "job_id": w.job_id,
        "window_id": w.window_id,
        "start_real_ns": w.start_real_ns,
        "end_real_ns": w.end_real_ns,
        "notes": w.notes,
        "processes": procs,
    }
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)  # type: ignore[arg-type]
    return buf.getvalue()


def _view(raw: Any, dtype: np.dtype, what: str) -> np.ndarray:
    if not isinstance(raw, np.ndarray) or raw.dtype != np.uint8 or raw.ndim != 1 or raw.size % dtype.itemsize:
        raise CaptureFileError(f"{what}: not a byte array of whole records")
    return raw.view(dtype)


def loads(data: bytes | Path, abi: Abi | None = None) -> WindowResult:
    a = abi or load()
    try:
        npz = np.load(data if isinstance(data, Path) else io.BytesIO(data), allow_pickle=False)
        meta = json.loads(bytes(npz["meta"]).decode())
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, UnicodeDecodeError) as e:
        raise CaptureFileError(f"not a gitm capture file: {e}") from e
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CaptureFileError("not a gitm capture file (format marker missing)")
    if meta.get("version") not in (1, VERSION) or meta.get("abi_version") != a.version:
        raise CaptureFileError(
            f"capture file version {meta.get('version')}/ABI {meta.get('abi_version')}; "
            f"this gitmd reads {VERSION}/ABI {a.version}"
        )
    procs_meta = meta.get("processes")
    if not isinstance(procs_meta, list) or len(procs_meta) > MAX_PROCESSES:
        raise CaptureFileError("bad process list")
    pair_dtype = a.header.fields["clock_pairs"][0].base  # type: ignore[index]
    procs = []
    try:
        for i, pm in enumerate(procs_meta):
            arrays = {
                kind: _view(npz[f"p{i}_{kind}"], a.payloads[a.const(const)], f"process {i} {kind}")
                for kind, const in _KINDS.items()
                if kind not in _OPTIONAL or f"p{i}_{kind}" in npz
            }
            names = {int(k): str(v) for k, v in pm["names"].items()}
            status = RingStatus(**pm["status"])
            pairs = _view(npz[f"p{i}_clock_pairs"], pair_dtype, f"process {i} clock pairs")
            procs.append(ProcessWindow(int(pm["pid"]), status, Decoded(**arrays, names=names), pairs))
        context = WindowContext.empty()
        if meta["version"] >= 2:
            cm = meta["context"]
            context = WindowContext(
                float(cm["interval_s"]),
                tuple(int(x) for x in cm["cores"]),
                tuple(int(x) for x in cm["gpus"]),
                int(cm["main_tid"]),
                _view(npz["ctx_host"], HOST_DTYPE, "host context"),
                _view(npz["ctx_gpu"], GPU_DTYPE, "GPU context"),
                tuple(str(n) for n in cm["notes"]),
            )
        return WindowResult(
            str(meta["job_id"]),
            int(meta["window_id"]),
            int(meta["start_real_ns"]),
            int(meta["end_real_ns"]),
            procs,
            [str(n) for n in meta.get("notes", [])],
            context,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CaptureFileError(f"malformed capture file: {e}") from e


def trim(w: WindowResult, seconds: float | None = None, max_kernels: int | None = None) -> WindowResult:
    """The window cut short: its first ``seconds``, or up to the start of its busiest process's
    ``max_kernels``-th kernel, whichever is earlier; every process, record type and context series
    cut at the same instant. For small test fixtures taken from long captures."""
    from gitmd.analysis.timeline import cupti_to_real_offset

    cut_real = w.end_real_ns
    if seconds is not None:
        cut_real = min(cut_real, w.start_real_ns + round(seconds * 1e9))
    procs = [p for p in w.processes if len(p.records.kernels)]
    if max_kernels is not None and procs:
        main = max(procs, key=lambda p: len(p.records.kernels))
        off = cupti_to_real_offset(main.clock_pairs)
        starts = np.sort(main.records.kernels["start_ns"].astype(np.int64))
        if off is not None and len(starts) > max_kernels:
            cut_real = min(cut_real, int(starts[max_kernels]) + off)
    out = []
    for p in w.processes:
        off = cupti_to_real_offset(p.clock_pairs)
        if off is None:
            out.append(p)
            continue
        cut = cut_real - off
        r = p.records
        kept = {
            kind: getattr(r, kind)[getattr(r, kind)["start_ns"].astype(np.int64) < cut]
            for kind in ("kernels", "memcpys", "memsets", "memory")
        }
        # a host call still blocked at the cut would read as a stall over what was cut away
        kept["syncs"] = r.syncs[r.syncs["end_ns"].astype(np.int64) < cut]
        out.append(dataclasses.replace(p, records=dataclasses.replace(r, **kept)))
    c = w.context
    context = dataclasses.replace(
        c, host=c.host[c.host["t_ns"] <= cut_real], gpu=c.gpu[c.gpu["t_ns"] <= cut_real]
    )
    return dataclasses.replace(w, end_real_ns=cut_real, processes=out, context=context)
