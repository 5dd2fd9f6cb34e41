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
from gitmd.capture.decode import Decoded
from gitmd.capture.ring import RingStatus
from gitmd.capture.windows import ProcessWindow, WindowResult

FORMAT = "gitm-capture"
VERSION = 1
_KINDS = {
    "kernels": "GITM_REC_KERNEL",
    "memcpys": "GITM_REC_MEMCPY",
    "memsets": "GITM_REC_MEMSET",
    "syncs": "GITM_REC_SYNC",
    "memory": "GITM_REC_MEMORY",
    "clocks": "GITM_REC_CLOCK",
    "windows": "GITM_REC_WINDOW",
    "payloads": "GITM_REC_PAYLOAD",
}
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
    meta = {
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
    if meta.get("version") != VERSION or meta.get("abi_version") != a.version:
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
            }
            names = {int(k): str(v) for k, v in pm["names"].items()}
            status = RingStatus(**pm["status"])
            pairs = _view(npz[f"p{i}_clock_pairs"], pair_dtype, f"process {i} clock pairs")
            procs.append(ProcessWindow(int(pm["pid"]), status, Decoded(**arrays, names=names), pairs))
        return WindowResult(
            str(meta["job_id"]),
            int(meta["window_id"]),
            int(meta["start_real_ns"]),
            int(meta["end_real_ns"]),
            procs,
            [str(n) for n in meta.get("notes", [])],
        )
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CaptureFileError(f"malformed capture file: {e}") from e
