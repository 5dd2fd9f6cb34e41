"""The record layout, taken from the one C header (shim/include/gitm_shim.h) through cffi.

Only the section between GITM_ABI_BEGIN and GITM_ABI_END is parsed. numpy structured dtypes are
derived from cffi's view of the structs (names, offsets, sizes), so there is no second copy of the
layout to drift from the C one.
"""

from __future__ import annotations

import functools
import importlib.resources
from pathlib import Path
from typing import Any, cast

import numpy as np
from cffi import FFI

_REPO_HEADER = Path(__file__).resolve().parents[2] / "shim" / "include" / "gitm_shim.h"
_PRIMS = {
    "uint8_t": "u1",
    "uint16_t": "<u2",
    "uint32_t": "<u4",
    "uint64_t": "<u8",
    "int32_t": "<i4",
    "int64_t": "<i8",
    "char": "S1",
}


def header_text() -> str:
    """The header from the source tree, or the copy installed as package data."""
    if _REPO_HEADER.exists():
        return _REPO_HEADER.read_text(encoding="utf-8")
    return (importlib.resources.files("gitmd.capture") / "gitm_shim.h").read_text(encoding="utf-8")


def abi_section(text: str) -> str:
    start = text.index("/* GITM_ABI_BEGIN */") + len("/* GITM_ABI_BEGIN */")
    return text[start : text.index("/* GITM_ABI_END */")]


class Abi:
    """cffi's parse of the ABI section, its constants, and the numpy dtypes built from it."""

    def __init__(self, text: str) -> None:
        self.ffi = FFI()
        self.ffi.cdef(abi_section(text))
        self.lib: Any = self.ffi.dlopen(None)  # integer constants only; no symbols are used
        self.version = self.const("GITM_ABI_VERSION")
        self.page_size = self.const("GITM_PAGE_SIZE")
        self.record_size = self.const("GITM_RECORD_SIZE")
        self.header = self.dtype("struct gitm_ring_header")
        self.control = self.dtype("struct gitm_control")
        self.record = self.dtype("struct gitm_record")
        if self.record.itemsize != self.record_size:
            raise ValueError(
                f"struct gitm_record is {self.record.itemsize} bytes, ABI says {self.record_size}"
            )
        rec_fields = _fields(self.record)
        payload_offset = rec_fields["payload"][1]
        common = {n: rec_fields[n] for n in rec_fields if n != "payload"}
        self.payloads: dict[int, np.dtype] = {}
        for rec_type, struct in (
            (self.const("GITM_REC_KERNEL"), "struct gitm_kernel_payload"),
            (self.const("GITM_REC_MEMCPY"), "struct gitm_memcpy_payload"),
            (self.const("GITM_REC_MEMSET"), "struct gitm_memset_payload"),
            (self.const("GITM_REC_SYNC"), "struct gitm_sync_payload"),
            (self.const("GITM_REC_MEMORY"), "struct gitm_memory_payload"),
            (self.const("GITM_REC_CLOCK"), "struct gitm_clock_payload"),
            (self.const("GITM_REC_WINDOW"), "struct gitm_window_payload"),
            (self.const("GITM_REC_PAYLOAD"), "struct gitm_payload_payload"),
            (self.const("GITM_REC_HOSTSRC"), "struct gitm_hostsrc_payload"),
        ):
            pf = _fields(self.dtype(struct))
            own = [n for n in pf if not n.startswith("_")]
            names = [*common, *own]
            formats = [common[n][0] for n in common] + [pf[n][0] for n in own]
            offsets = [common[n][1] for n in common] + [payload_offset + pf[n][1] for n in own]
            self.payloads[rec_type] = np.dtype(
                cast(
                    Any,
                    {"names": names, "formats": formats, "offsets": offsets, "itemsize": self.record_size},
                )
            )

    def const(self, name: str) -> int:
        return int(getattr(self.lib, name))

    def dtype(self, ctype: str | Any) -> np.dtype:
        t = self.ffi.typeof(ctype) if isinstance(ctype, str) else ctype
        names, formats, offsets = [], [], []
        for name, field in t.fields:
            ft = field.type
            if ft.kind == "array":
                item = ft.item
                if item.cname == "char":
                    fmt: Any = f"S{ft.length}"
                elif item.kind == "struct":
                    fmt = (self.dtype(item), ft.length)
                else:
                    fmt = (_PRIMS[item.cname], ft.length)
            elif ft.kind == "struct":
                fmt = self.dtype(ft)
            else:
                fmt = _PRIMS[ft.cname]
            names.append(name)
            formats.append(fmt)
            offsets.append(field.offset)
        spec = {
            "names": names,
            "formats": formats,
            "offsets": offsets,
            "itemsize": self.ffi.sizeof(cast(Any, t)),
        }
        return np.dtype(cast(Any, spec))


def _fields(dt: np.dtype) -> dict[str, tuple[Any, int]]:
    """A structured dtype's fields as name -> (dtype, offset), in order."""
    assert dt.fields is not None and dt.names is not None
    return {n: (dt.fields[n][0], int(dt.fields[n][1])) for n in dt.names}


@functools.cache
def load() -> Abi:
    return Abi(header_text())
