"""Where a capture file's window went, for a client that sends the file (ExplainCapture: `gitmctl
explain --capture FILE --history FILE...`): the same report as a job's own window, from the
caller's bytes alone; nothing is stored.

A capture file is input like any other and may be hostile: its arrays are checked as they load
(``capture_file.loads``), at most MAX_UNPACKED bytes are unpacked from all the files of a request
together, and at most MAX_AT_ONCE requests are analysed at once (the rest wait), so clients cannot
take the daemon's memory or all its workers.
"""

from __future__ import annotations

import io
import logging
import threading
import zipfile
from collections.abc import Sequence

from gitmd.analysis.report import WindowReport, history_of, window_report
from gitmd.capture import capture_file
from gitmd.errors import InvalidArgumentError

log = logging.getLogger(__name__)

MAX_UNPACKED = 4 << 30  # bytes, all the request's files unpacked
MAX_HISTORY = 32
MAX_AT_ONCE = 2
MAX_TOP = 1000  # kernels listed per process
_slots = threading.BoundedSemaphore(MAX_AT_ONCE)


def _unpacked_size(name: str, data: bytes) -> int:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            return sum(i.file_size for i in z.infolist())
    except (zipfile.BadZipFile, ValueError, OSError) as e:
        raise InvalidArgumentError(f"{name}: not a gitm capture file: {e}") from None


def explain_capture(
    capture: tuple[str, bytes], history: Sequence[tuple[str, bytes]] = (), top: int = 8
) -> WindowReport:
    """``capture`` and each of ``history``: (a name for messages, the file's bytes)."""
    if len(history) > MAX_HISTORY:
        raise InvalidArgumentError(f"at most {MAX_HISTORY} history files")
    files = [*history, capture]
    if sum(_unpacked_size(name, data) for name, data in files) > MAX_UNPACKED:
        raise InvalidArgumentError(f"the capture files unpack to more than {MAX_UNPACKED >> 30} GiB")
    with _slots:
        windows = []
        for name, data in files:
            try:
                windows.append(capture_file.loads(data))
            except capture_file.CaptureFileError as e:
                raise InvalidArgumentError(f"{name}: {e}") from None
        *past, w = windows
        if any(h.job_id != w.job_id for h in past):
            raise InvalidArgumentError("the history files are of another job than the capture")
        try:
            return window_report(w, max(0, min(top, MAX_TOP)), history_of(past) if past else None)
        except Exception as e:  # hostile records no window of gitmd's own would hold: the caller's error
            log.warning("capture %s could not be analysed", capture[0], exc_info=True)
            raise InvalidArgumentError(f"{capture[0]}: cannot be analysed: {type(e).__name__}: {e}") from None
