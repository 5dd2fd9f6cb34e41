"""What a large request leaves in gitmd's heap, given back to the system once it is answered.

A request is read whole before any handler sees it, whoever sends it and whatever the answer: 40
concurrent ~16-MiB ImportLibrary calls from a user who may not make them raised gitmd's RSS from
258 MB to 724 MB, and 586 MB stayed resident after they were all refused (glibc keeps freed large
blocks in its arenas once its mmap threshold has grown past them; hostile-user run, 2026-12-04).
After a request of LARGE_REQUEST_BYTES or more, glibc's ``malloc_trim`` returns the free pages: from
a thread of its own, TRIM_DELAY_S later (the request is still referenced while its handler returns,
and one trim serves a burst). The peak is bounded by the request cap
(gitmd.api.server.MAX_RECEIVE_BYTES) times the workers.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from typing import Any

log = logging.getLogger(__name__)

LARGE_REQUEST_BYTES = 1 << 20
TRIM_DELAY_S = 0.2

_lock = threading.Lock()
_trim: Any = None  # the C function, False where the C library has none (not glibc)
_due = threading.Event()
_thread: threading.Thread | None = None
trims = 0  # trims made since start (tests read it)


def _malloc_trim() -> Any:
    global _trim
    if _trim is None:
        try:
            fn = ctypes.CDLL(None).malloc_trim
            fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
            _trim = fn
        except (OSError, AttributeError):
            _trim = False
    return _trim


def size(msg: Any, depth: int = 3) -> int:
    """About how many bytes ``msg`` took on the wire: its string and bytes fields, repeated ones and
    those of nested messages (``depth`` levels) counted, without serialising it (the installed
    protobuf's ByteSize serialises: 17 ms and 16 MiB more for a 16-MiB document)."""
    try:
        fields = msg.ListFields()
    except AttributeError:
        return 0
    n = 0
    for _, value in fields:
        for v in value if isinstance(value, (list, tuple)) or hasattr(value, "extend") else (value,):
            if isinstance(v, (str, bytes)):
                n += len(v)
            elif depth > 0 and hasattr(v, "ListFields"):
                n += size(v, depth - 1)
            else:
                n += 8
    return n


def _trimmer() -> None:
    global trims
    while True:
        _due.wait()
        _due.clear()
        threading.Event().wait(TRIM_DELAY_S)  # its handler and grpc let go of the request first
        fn = _malloc_trim()
        if fn:
            fn(0)
        trims += 1


def release(request: Any) -> bool:
    """After ``request`` was answered: when it was large, the heap's free pages are given back a
    moment later (coalesced with other large requests of that moment). True when a trim is due."""
    if size(request) < LARGE_REQUEST_BYTES:
        return False
    global _thread
    with _lock:
        if not _malloc_trim():
            return False
        if _thread is None:
            _thread = threading.Thread(target=_trimmer, name="heap-trim", daemon=True)
            _thread.start()
    _due.set()
    return True
