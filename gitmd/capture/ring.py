"""Reading a shim's ring file as hostile input, and writing its control page.

Every size and offset in the header is checked against the file before any record is read; the
file is opened with O_NOFOLLOW and must be a regular file. gitmd never maps the file: the job's
user owns it and could shrink it under a mapping, and touching a mapped page past the end kills
the reader (SIGBUS: any local user could stop gitmd with `truncate -s 0`). Every read is a pread
and every control write a pwrite on the file (the same page cache the shim maps, so both see each
other's writes); a read that comes back short means the file shrank: RingShrunk, the ring is
dropped. Draining copies the contiguous published slots from ``tail`` in one read, then advances
``tail``.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Any

import numpy as np

from gitmd.capture.abi import Abi, load
from gitmd.records import RingStatus

MAX_RING_FILE_BYTES = 1 << 31  # 2 GiB: the shim caps capacity at 2^24 records (1 GiB)
STATUS_NAMES = {0: "init", 1: "idle", 2: "capturing", 3: "stepped_aside", 4: "off"}


DISCARD_CHUNK = 1 << 16  # records read at once while giving a ring's records back unread
_MAX_COUNTER = (1 << 63) - (1 << 27)  # head/tail count records; far beyond any real process


class RingError(Exception):
    """The file is not a valid ring: the message says what is wrong. Log it and skip the file."""


class RingNotReady(RingError):
    """The shim is still creating the file (no magic yet); try again later."""


class RingShrunk(RingError):
    """The file is shorter than it was when it was validated (its owner truncated it)."""


class Page:
    """A struct of the ring file (the header, the control page), read and written field by field
    with pread/pwrite at its offset: ``page["head"]``, ``page["tail"] = n``, ``page.snapshot()``."""

    def __init__(self, ring: Ring, dtype: np.dtype, offset: int) -> None:
        self._ring, self._dtype, self._offset = ring, dtype, offset

    def _field(self, name: str) -> tuple[np.dtype, int]:
        fields = self._dtype.fields
        assert fields is not None
        sub, off = fields[name][:2]
        return sub, self._offset + off

    def __getitem__(self, name: str) -> Any:
        sub, off = self._field(name)
        data = self._ring.pread(off, sub.itemsize)
        return np.frombuffer(data, dtype=sub.base).reshape(sub.shape)[()]

    def __setitem__(self, name: str, value: Any) -> None:
        sub, off = self._field(name)
        self._ring.pwrite(off, np.asarray(value, dtype=sub.base).reshape(sub.shape).tobytes())

    def snapshot(self) -> Any:
        """The whole struct in one read (a copy)."""
        return np.frombuffer(self._ring.pread(self._offset, self._dtype.itemsize), dtype=self._dtype)[0]


class Ring:
    """One ring file, read and written through its descriptor (never mapped); ``drain`` for
    records, the control methods for windows and knobs."""

    def __init__(self, path: Path | str, abi: Abi | None = None, owner_uid: int | None = None) -> None:
        """Open ``path``. With ``owner_uid`` the file must belong to that uid and have one link: a
        job's user cannot make gitmd write the control page of a file that is not their ring."""
        self.path = Path(path)
        self.abi = abi or load()
        a = self.abi
        self._fd = -1
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as e:
            raise RingError(f"{self.path}: cannot open: {e.strerror}") from e
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise RingError(f"{self.path}: not a regular file")
            if owner_uid is not None and st.st_uid != owner_uid:
                raise RingError(f"{self.path}: owned by uid {st.st_uid}, not the job's uid {owner_uid}")
            if owner_uid is not None and st.st_nlink != 1:
                raise RingError(f"{self.path}: has {st.st_nlink} hard links (a ring file has one)")
            size = st.st_size
            if size < 2 * a.page_size:
                raise RingError(f"{self.path}: truncated ({size} bytes, less than two pages)")
            if size > MAX_RING_FILE_BYTES:
                raise RingError(f"{self.path}: absurd size {size} bytes")
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self.size = size
        self.inode = (st.st_dev, st.st_ino)
        self.hdr = Page(self, a.header, 0)
        self.ctl = Page(self, a.control, a.page_size)
        try:
            self._validate()
        except BaseException:
            self.close()
            raise
        cap = int(self.hdr["capacity"])
        self.capacity = cap
        self.mask = cap - 1
        self._records_offset = int(self.hdr["records_offset"])
        self.pid = int(self.hdr["pid"])
        self.start_time_ticks = int(self.hdr["start_time_ticks"])

    # -- the file ----------------------------------------------------------------------------
    def pread(self, offset: int, n: int) -> bytes:
        if self._fd < 0:
            raise RingError(f"{self.path}: closed")
        try:
            data = os.pread(self._fd, n, offset)
        except OSError as e:
            raise RingError(f"{self.path}: cannot read: {e.strerror}") from e
        if len(data) < n:
            raise RingShrunk(f"{self.path}: the file shrank (read {len(data)} of {n} bytes at {offset})")
        return data

    def pwrite(self, offset: int, data: bytes) -> None:
        if self._fd < 0:
            raise RingError(f"{self.path}: closed")
        try:
            if os.fstat(self._fd).st_size < self.size:  # never grow a file its owner shrank
                raise RingShrunk(f"{self.path}: the file shrank; not written")
            os.pwrite(self._fd, data, offset)
        except OSError as e:
            raise RingError(f"{self.path}: cannot write: {e.strerror}") from e

    def read_rows(self, start: int, n: int) -> np.ndarray:
        """Slots ``start`` .. ``start + n`` (no wrap) as rows of eight little-endian words, a copy."""
        data = self.pread(self._records_offset + start * 64, n * 64)
        return np.frombuffer(data, dtype="<u8").reshape(n, 8)

    def write_rows(self, start: int, rows: np.ndarray) -> None:
        """Slots from ``start`` (tests and benchmarks stand in for a shim with this)."""
        self.pwrite(self._records_offset + start * 64, np.ascontiguousarray(rows, dtype="<u8").tobytes())

    def _validate(self) -> None:
        a, h = self.abi, self.hdr.snapshot()
        magic = int(h["magic"])
        if magic == 0:
            raise RingNotReady(f"{self.path}: not initialised yet")
        if magic != a.const("GITM_RING_MAGIC"):
            raise RingError(f"{self.path}: wrong magic {magic:#x}")
        if int(h["abi_version"]) != a.version:
            raise RingError(
                f"{self.path}: shim ABI version {int(h['abi_version'])}, this gitmd speaks {a.version}: "
                "the shim and gitmd come from different builds"
            )
        if int(h["record_size"]) != a.record_size:
            raise RingError(f"{self.path}: record size {int(h['record_size'])}, expected {a.record_size}")
        cap = int(h["capacity"])
        if cap < 1 or cap & (cap - 1) or cap > (1 << 26):
            raise RingError(f"{self.path}: capacity {cap} is not a sane power of two")
        off = int(h["records_offset"])
        if off != 2 * a.page_size:
            raise RingError(f"{self.path}: records offset {off}, expected {2 * a.page_size}")
        if int(h["file_size"]) != self.size or off + cap * a.record_size != self.size:
            raise RingError(f"{self.path}: header says {int(h['file_size'])} bytes, file has {self.size}")
        if int(self.ctl["magic"]) != a.const("GITM_CONTROL_MAGIC"):
            raise RingError(f"{self.path}: control page has the wrong magic")

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    # -- reading -----------------------------------------------------------------------------
    def pending(self) -> int:
        head, tail = int(self.hdr["head"]), int(self.hdr["tail"])
        return max(0, min(head - tail, self.capacity))

    def peek(self, max_records: int | None = None) -> tuple[np.ndarray, int]:
        """The published records from tail on as rows of 8 words (a copy, read in at most two
        reads) and their count. Call ``advance`` once they have been used."""
        tail = int(self.hdr["tail"])
        head = int(self.hdr["head"])
        n = head - tail
        if n <= 0 or tail > _MAX_COUNTER:  # nothing, or counters no shim could have written
            return np.zeros((0, 8), dtype="<u8"), 0
        n = min(n, self.capacity, max_records or self.capacity)
        start = tail & self.mask
        first = min(n, self.capacity - start)
        parts = [self.read_rows(start, first)]
        if n > first:
            parts.append(self.read_rows(0, n - first))  # wrapped around
        rows = np.concatenate(parts) if len(parts) > 1 else parts[0]
        # only slots found published are handed out: stop at the first one still being written
        published = rows[:, 0] == np.arange(tail + 1, tail + n + 1, dtype=np.uint64)
        if not published.all():
            n = int(np.argmin(published))
        return rows[:n], n

    def advance(self, n: int) -> None:
        """Give ``n`` slots back to the producers (after their contents were copied out)."""
        self.hdr["tail"] = int(self.hdr["tail"]) + n

    def discard(self) -> int:
        """Give every published record back to the producers unread; how many. Read a chunk at a
        time (only to find where publication stops), so a huge ring costs no more memory than one."""
        total = 0
        while True:
            _, n = self.peek(DISCARD_CHUNK)
            self.advance(n)
            total += n
            if n < DISCARD_CHUNK:
                return total

    def drain(self, max_records: int | None = None) -> np.ndarray:
        """Copy the published records from tail on (in order) and advance tail past them."""
        rows, n = self.peek(max_records)
        self.advance(n)
        return np.ascontiguousarray(rows).view(self.abi.record).reshape(-1)

    def status(self) -> RingStatus:
        """The header now; RingShrunk once the file is shorter than it was (its records or control
        page gone, even if the header still reads)."""
        try:
            if os.fstat(self._fd).st_size < self.size:
                raise RingShrunk(f"{self.path}: the file shrank")
        except OSError as e:
            raise RingError(f"{self.path}: cannot stat: {e.strerror}") from e
        h = self.hdr.snapshot()
        head, tail = int(h["head"]), int(h["tail"])
        return RingStatus(
            pid=int(h["pid"]),
            start_time_ticks=int(h["start_time_ticks"]),
            status=STATUS_NAMES.get(int(h["status"]), f"unknown({int(h['status'])})"),
            reason=bytes(h["status_reason"]).split(b"\0", 1)[0].decode("utf-8", "replace"),
            window_id=int(h["window_id"]),
            records_written=int(h["records_written"]),
            ring_drops=int(h["ring_drops"]),
            cupti_drops=int(h["cupti_drops"]),
            missing_timestamps=int(h["missing_timestamps"]),
            buffers_completed=int(h["buffers_completed"]),
            windows_opened=int(h["windows_opened"]),
            cupti_version=int(h["cupti_version"]),
            capacity=self.capacity,
            pending=max(0, min(head - tail, self.capacity)),
            detaches=int(h["detaches"]),
            created_real_ns=int(h["created_real_ns"]),
        )

    def clock_pairs(self) -> np.ndarray:
        h = self.hdr.snapshot()
        count = min(int(h["clock_pair_count"]), len(h["clock_pairs"]))
        pairs = np.array(h["clock_pairs"][:count])
        return pairs[pairs["cupti_ns"] > 0]

    # -- control -----------------------------------------------------------------------------
    def open_window(
        self,
        window_id: int,
        kinds_mask: int,
        flush_interval_ms: int = 250,
        heartbeat_timeout_ms: int = 10_000,
    ) -> int:
        c = self.ctl
        c["window_id"] = window_id
        c["kinds_mask"] = kinds_mask
        c["flush_interval_ms"] = flush_interval_ms
        c["heartbeat_timeout_ms"] = heartbeat_timeout_ms
        c["heartbeat_mono_ns"] = time.monotonic_ns()
        c["window_open"] = 1
        seq = (int(c["window_seq"]) + 1) & 0xFFFFFFFF
        c["window_seq"] = seq  # last: the shim acts on a new sequence number
        return seq

    def close_window(self) -> int:
        c = self.ctl
        c["window_open"] = 0
        seq = (int(c["window_seq"]) + 1) & 0xFFFFFFFF
        c["window_seq"] = seq
        return seq

    def heartbeat(self) -> None:
        self.ctl["heartbeat_mono_ns"] = time.monotonic_ns()

    def acked(self, seq: int) -> bool:
        return int(self.ctl["window_ack"]) == seq

    def knob(self, op: int, args: tuple[int, ...] = (), timeout_s: float = 2.0) -> tuple[int, list[int]]:
        """Send a knob command; (result, outputs) once the shim acknowledges; TimeoutError if not."""
        c = self.ctl
        c["knob_args"] = [args[i] if i < len(args) else 0 for i in range(4)]
        c["knob_op"] = op
        seq = (int(c["knob_seq"]) + 1) & 0xFFFFFFFF
        c["knob_seq"] = seq
        deadline = time.monotonic() + timeout_s
        while int(c["knob_ack"]) != seq:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.path}: the shim did not acknowledge knob {op} within {timeout_s} s"
                )
            time.sleep(0.005)
        return int(c["knob_result"]), [int(v) for v in c["knob_out"]]
