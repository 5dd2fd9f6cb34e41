"""What a large request leaves in gitmd's heap, given back to the system once it is answered.

A request is read whole before any handler sees it, whoever sends it and whatever the answer: 40
concurrent ~16-MiB ImportLibrary calls from a user who may not make them raised gitmd's RSS from
258 MB to 724 MB, and 586 MB stayed resident after they were all refused (glibc keeps freed large
blocks in its arenas once its mmap threshold has grown past them; hostile-user run, 2026-12-04).
After a request of LARGE_REQUEST_BYTES or more, glibc's ``malloc_trim`` returns the free pages.
The peak is bounded by the request cap (gitmd.api.server.MAX_RECEIVE_BYTES) times the workers.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from typing import Any

log = logging.getLogger(__name__)

LARGE_REQUEST_BYTES = 1 << 20

_lock = threading.Lock()
_trim: Any = None  # the C function, False where the C library has none (not glibc)


def _malloc_trim() -> Any:
    global _trim
    with _lock:
        if _trim is None:
            try:
                fn = ctypes.CDLL(None).malloc_trim
                fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
                _trim = fn
            except (OSError, AttributeError):
                _trim = False
        return _trim


def release(request: Any) -> bool:
    """After ``request`` was answered: the heap's free pages given back when it was large. True when
    they were."""
    try:
        size = request.ByteSize()
    except (AttributeError, TypeError, ValueError):
        return False
    if size < LARGE_REQUEST_BYTES:
        return False
    fn = _malloc_trim()
    if not fn:
        return False
    fn(0)
    return True
