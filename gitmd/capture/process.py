"""One process's capture: its ring, its status as last read, and what its windows delivered."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field

from gitmd.capture.decode import Decoded, NameTable
from gitmd.capture.ranks import Rank
from gitmd.capture.ring import Ring, RingError, RingStatus
from gitmd.jobs.liveness import start_ticks

log = logging.getLogger(__name__)


def process_alive(pid: int, ticks: int) -> bool:
    """The process that created a ring is still the one running under that pid."""
    return start_ticks(pid) == ticks


def empty_window_note(pid: int, before: int, syncs: int) -> str:
    """A window the shim opened in a process that launched kernels in earlier ones, lives on and
    synchronized in it, but delivered no kernel: CUPTI gave no activity record (H200 2026-12-04: a
    contended launch-bound job's windows 3-9, its syncs still recorded). Nothing of it is analysed;
    the shim's own lines (GITM_SHIM_DEBUG=1 in the job's environment) say what CUPTI did."""
    return (
        f"pid {pid}: no kernel record in this window ({syncs} syncs) though its earlier windows held "
        f"{before}: CUPTI delivered none (GITM_SHIM_DEBUG=1 in the job's environment shows the shim's view)"
    )


@dataclass
class ProcessCapture:
    ring: Ring
    names: NameTable = field(default_factory=NameTable)
    exited: bool | None = None  # set by the pidfd watcher; None: not watched, ask /proc
    observed: bool = False  # its observation ended (GITM_KNOB_DETACH sent): no more windows
    exited_real_ns: int = 0  # when the pidfd watcher saw it exit (0: not seen)
    broken: str = ""  # why its ring can no longer be read (its owner shrank it): ignored from then
    last: RingStatus | None = None
    rank: Rank | None = None  # its rank in a distributed job (torchrun's or Slurm's variables)
    kernels_before: int = 0  # kernel records its earlier windows delivered
    windows_opened: int = 0  # the shim's count of windows it opened, at the end of the last one

    @property
    def alive(self) -> bool:
        if self.broken:
            return False
        if self.exited is not None:
            return not self.exited
        return process_alive(self.ring.pid, self.ring.start_time_ticks)

    def status(self) -> RingStatus:
        """The ring's header now; once it cannot be read, the last one read, marked off."""
        if not self.broken:
            try:
                self.last = self.ring.status()
                return self.last
            except RingError as e:
                self.fail(e)
        last = self.last or RingStatus(
            self.ring.pid, self.ring.start_time_ticks, "off", "", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
        )
        return dataclasses.replace(last, status="off", reason=self.broken[:160])

    def seen(self) -> RingStatus:
        """Its status as last read, without reading the ring (while a window holds the job): a
        process found but not read yet is "unknown", one whose ring broke is "off" with why."""
        last = self.last or RingStatus(
            self.ring.pid, self.ring.start_time_ticks, "unknown", "not read yet", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
        )
        if self.broken:
            return dataclasses.replace(last, status="off", reason=self.broken[:160])
        return last

    def fail(self, e: RingError) -> None:
        if not self.broken:
            self.broken = str(e)
            log.warning("capture: ignoring the ring from now on: %s", e)

    @property
    def observable(self) -> bool:
        """Alive and its shim may still open a window: its observation has not ended (by gitmd, or
        by a detach its ring counts, e.g. a shim of the older detach-at-every-window kind)."""
        return self.alive and not self.observed and self.status().detaches == 0 and not self.broken

    def delivered(self, decoded: Decoded, status: RingStatus) -> str:
        """What a closed window drained from it, counted; a note when the window is empty though it
        should not be (empty_window_note: opened by the shim, the process alive and synchronizing
        in it, kernels in its earlier windows), else ""."""
        empty = (
            not len(decoded.kernels)
            and self.kernels_before
            and len(decoded.syncs)  # it was at work in the window: not a helper gone idle
            and status.windows_opened > self.windows_opened  # the shim opened this window
            and self.alive
        )
        note = empty_window_note(self.ring.pid, self.kernels_before, len(decoded.syncs)) if empty else ""
        self.kernels_before += len(decoded.kernels)
        self.windows_opened = status.windows_opened
        return note
