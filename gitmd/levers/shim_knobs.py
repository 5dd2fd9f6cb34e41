"""Live levers inside the job's process, through the shim's control page (knob commands).

The shim runs each command on its own thread, never inside a CUPTI callback, and acknowledges it
with a result and outputs (``gitm_shim.h``: GITM_KNOB_*). ``capture`` reads the current value with a
query-only command, so ``revert`` restores what the process had, not a default. The target names
the ring file of each process (``Target.rings``): a restarted gitmd reverts through the same file.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from typing import Any, ClassVar

from gitmd.levers.base import Kind, Lever, LeverError, Risk, Target

UINT64 = (1 << 64) - 1
# what a knob's negative errno means, for every knob; each lever adds its own (``why``)
_WHY = {
    -errno.ENOSYS: "the shim in the process does not know this knob (an older shim)",
    -errno.ELIBACC: "the shim could not find libcuda's functions in the process",
    -errno.EINVAL: "the shim refused the value",
    -errno.ENODEV: "no such device in the process",
    -errno.EIO: "the CUDA call failed",
}


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


class KnobLever(Lever):
    kind = Kind.LIVE_SHIM
    op_name: ClassVar[str]
    why: ClassVar[dict[int, str]] = {}  # this knob's own results, in words (gitm_shim.h)

    def _pid(self) -> int:
        try:
            return int(self.setting["pid"])
        except (KeyError, TypeError, ValueError):
            raise LeverError(f"{self.name}: the setting names no process (pid)") from None

    def send(
        self, target: Target, args: tuple[int, ...], ok: tuple[int, ...] = (), pid: int | None = None
    ) -> list[int]:
        """The knob's outputs; a result other than 0 (or one of ``ok``) raises LeverError."""
        from gitmd.capture.ring import Ring, RingError  # the capture package loads cffi: only when used

        pid = self._pid() if pid is None else pid
        path = target.rings.get(pid)
        if path is None:
            raise LeverError(f"{self.name}: no shim ring for pid {pid} (the process is not captured)")
        try:
            ring = Ring(path, owner_uid=target.ring_uids.get(pid, target.owner_uid))
        except RingError as e:
            raise LeverError(f"{self.name}: {e}") from None
        try:
            if ring.pid != pid:
                raise LeverError(f"{self.name}: {path} belongs to pid {ring.pid}, not {pid}")
            op = ring.abi.const(self.op_name)
            try:
                rc, out = ring.knob(op, tuple(a & UINT64 for a in args))
            except TimeoutError as e:
                raise LeverError(f"{self.name}: {e}") from None
        finally:
            ring.close()
        if rc != 0 and rc not in ok:
            why = {**_WHY, **self.why}.get(rc, os.strerror(-rc) if rc < 0 else str(rc))
            cu = f" (CUresult {out[2]})" if rc == -errno.EIO else ""
            raise LeverError(f"{self.name} on pid {pid}: {why}{cu}")
        return out


class StreamPriority(KnobLever):
    """Raise the priority of the stream the host waits on, so its kernels go ahead of the
    process's other streams' (priority orders kernels only; it does not preempt)."""

    name = "stream_priority"
    causes = frozenset({"stream_starved"})
    op_name = "GITM_KNOB_STREAM_PRIORITY"
    why: ClassVar[dict[int, str]] = {
        -errno.ENOENT: "the shim has not seen a kernel launch on that stream yet",
        -errno.ESTALE: "that stream is gone",
    }
    defaults = {"priority": -5}

    def resources(self) -> frozenset[str]:
        return frozenset({f"stream:{self.setting.get('pid')}:{self.setting.get('stream')}"})

    def _stream(self) -> int:
        return int(self.setting.get("stream", 0))

    def _query(self, target: Target) -> int:
        return _signed(self.send(target, (self._stream(), 0, 1))[0])

    def capture(self, target: Target) -> dict[str, Any]:
        return {"priority": self._query(target)}

    def apply(self, target: Target) -> None:
        self.send(target, (self._stream(), int(self.setting_or_default("priority")), 0))

    def verify(self, target: Target) -> None:
        want = int(self.setting_or_default("priority"))
        now = self._query(target)
        if now != want:
            raise LeverError(f"stream_priority: stream {self._stream()} runs at priority {now}, not {want}")

    def revert(self, target: Target, saved: Mapping[str, Any]) -> None:
        self.send(target, (self._stream(), int(saved["priority"]), 0))


class _DeviceValueKnob(KnobLever):
    """A knob on one value of a device's state in the process (args: device ordinal, value, 1 to
    only read; out[0] the value before): read, set, read back, put back. ``field`` names the value
    in the setting and in what capture saves (its default value in ``defaults``); ``resource`` what
    two levers must not share."""

    field: ClassVar[str]
    resource: ClassVar[str]

    def resources(self) -> frozenset[str]:
        return frozenset({f"{self.resource}:{self.setting.get('pid')}:{self._device()}"})

    def _device(self) -> int:
        return int(self.setting.get("device", 0))

    def _want(self) -> int:
        return int(self.setting_or_default(self.field))

    def current(self, target: Target) -> int:
        return self.send(target, (self._device(), 0, 1))[0]

    def capture(self, target: Target) -> dict[str, Any]:
        return {self.field: self.current(target)}

    def apply(self, target: Target) -> None:
        self.send(target, (self._device(), self._want(), 0))

    def verify(self, target: Target) -> None:
        now = self.current(target)
        if now != self._want():
            raise LeverError(self._mismatch(now))

    def _mismatch(self, now: int) -> str:
        return f"{self.name}: {self.field} is {now}, not {self._want()}"

    def revert(self, target: Target, saved: Mapping[str, Any]) -> None:
        self.send(target, (self._device(), int(saved[self.field]), 0))


class MempoolRelease(_DeviceValueKnob):
    """The release threshold of the device's default memory pool (cudaMallocAsync users): keep
    freed memory in the pool instead of returning it to the driver at every synchronization."""

    name = "mempool_release"
    causes = frozenset({"allocator"})
    op_name = "GITM_KNOB_MEMPOOL_RELEASE"
    field = "bytes"
    resource = "mempool"
    defaults = {"bytes": UINT64}

    def _mismatch(self, now: int) -> str:
        return f"mempool_release: the pool's threshold is {now}, not {self._want()}"


class AllocKeepCacheLive(KnobLever):
    """``alloc_keep_cache`` switched while the job runs: a job that empties PyTorch's allocator
    cache every step pays a cudaFree (which waits for the device) and a cudaMalloc each time; with
    the shim's keep-cache flag set, gitmd's sitecustomize (on the job's path as GITMD_LIVE_FLAGS=1)
    makes torch.cuda.empty_cache() keep the cache. The allocator still frees cached blocks itself
    before an allocation would pass the device's memory or the job's memory fraction; other
    processes on the GPU see the memory held, hence the memory risk. Reverting clears the flag: the
    job's next empty_cache() hands the cache back as before."""

    name = "alloc_keep_cache_live"
    causes = frozenset({"allocator"})
    risk = Risk.MEMORY
    op_name = "GITM_KNOB_FLAG"
    FLAG = 1  # GITM_FLAG_KEEP_CACHE
    why: ClassVar[dict[int, str]] = {-errno.EINVAL: "the shim in the process has no such flag"}

    def resources(self) -> frozenset[str]:
        return frozenset({f"allocator-cache:{self.setting.get('pid')}"})

    def read(self, target: Target) -> tuple[int, int]:
        """The flag now and how many times the process's hook has read it."""
        out = self.send(target, (self.FLAG, 0, 1))
        return out[1], out[2]

    def capture(self, target: Target) -> dict[str, Any]:
        return {"keep": self.read(target)[0]}

    def apply(self, target: Target) -> None:
        self.send(target, (self.FLAG, 1, 0))

    def verify(self, target: Target) -> None:
        keep, reads = self.read(target)
        if keep != 1:
            raise LeverError(f"alloc_keep_cache_live: the keep-cache flag is {keep}, not 1")
        if reads == 0:
            raise LeverError(
                "alloc_keep_cache_live: no hook in the process reads the flag (it calls "
                "torch.cuda.empty_cache() without gitmd's sitecustomize: no GITMD_LIVE_FLAGS=1 at launch)"
            )

    def revert(self, target: Target, saved: Mapping[str, Any]) -> None:
        self.send(target, (self.FLAG, int(saved.get("keep", 0)), 0))


SCHED_NAMES = {0: "auto", 1: "spin", 2: "yield", 4: "blocking sync"}


class SyncSpin(_DeviceValueKnob):
    """Have the process's CUDA context spin in its synchronizations instead of sleeping until the
    driver's interrupt wakes it: a job that synchronizes every step under blocking sync (set by its
    framework or by cudaSetDeviceFlags) pays the wake-up each time while the GPU sits idle. The
    waiting thread busy-waits on its core instead; results do not change."""

    name = "sync_spin"
    host_only = True
    causes = frozenset({"sync_stall"})
    op_name = "GITM_KNOB_CTX_SCHED"
    field = "sched"
    resource = "context"
    why: ClassVar[dict[int, str]] = {
        -errno.ESRCH: "the process has no active CUDA context on that device",
        -errno.ENOTSUP: "this driver cannot change a live context's flags (cuCtxSetFlags, CUDA 12.1)",
    }
    SPIN = 1  # CU_CTX_SCHED_SPIN
    SLEEPING = (2, 4)  # CU_CTX_SCHED_YIELD, CU_CTX_SCHED_BLOCKING_SYNC: a wait that sleeps
    defaults = {"sched": SPIN}

    def _mismatch(self, now: int) -> str:
        got, want = SCHED_NAMES.get(now, str(now)), SCHED_NAMES.get(self._want(), str(self._want()))
        return f"sync_spin: the context waits by {got}, not {want}"


class PinHostBuffer(KnobLever):
    """Page-lock the host buffers a process copies to the device from pageable memory every step
    (``cuMemHostRegister``), so those copies run at pinned bandwidth instead of through the
    driver's staging buffer. Only buffers the host waits for after each copy are chosen
    (``gitmd.analysis.hostbuffers``). The job must run with gitmd's free guard preloaded: it
    unregisters a range before the program frees or unmaps it, so a registration never outlives
    its pages; a range the program gave back is already unregistered when this lever reverts."""

    name = "pin_host_buffer"
    causes = frozenset({"pageable_copy"})
    risk = Risk.MEMORY
    op_name = "GITM_KNOB_HOST_REGISTER"
    why: ClassVar[dict[int, str]] = {
        -errno.ENOTSUP: "the job was launched without gitmd's free guard (libgitm_guard.so not preloaded)",
        -errno.EFAULT: "the range is not private anonymous read-write memory of the process",
        -errno.ENOSPC: "the free guard's table is full",
        -errno.EBUSY: "the process has not copied to the device in a window yet (no CUDA context known)",
        -errno.ENOENT: "the range is not registered (any more)",
        -errno.ESTALE: "the process's CUDA context is gone",
    }

    def resources(self) -> frozenset[str]:
        return frozenset({f"hostmem:{self.setting.get('pid')}"})

    def describe(self) -> str:
        raw = self.setting.get("buffers")
        if not isinstance(raw, list) or not raw:
            return super().describe()
        try:
            parts = [f"{int(a):#x}+{int(n) / 2**20:.0f}MiB" for a, n in raw]
        except (TypeError, ValueError):
            return super().describe()
        return f"{self.name}(pid={self.setting.get('pid')}, {', '.join(parts)})"

    def _buffers(self) -> list[tuple[int, int]]:
        raw = self.setting.get("buffers")
        if not isinstance(raw, list) or not raw:
            raise LeverError("pin_host_buffer: the setting names no buffers ([[address, bytes], ...])")
        try:
            out = [(int(a), int(n)) for a, n in raw]
        except (TypeError, ValueError):
            raise LeverError("pin_host_buffer: buffers must be [[address, bytes], ...]") from None
        if any(a <= 0 or n <= 0 or a + n > UINT64 for a, n in out):
            raise LeverError("pin_host_buffer: a buffer has a bad address or size")
        return out

    def _registered(self, target: Target, address: int, size: int) -> bool:
        return bool(self.send(target, (address, size, 2))[0])

    def capture(self, target: Target) -> dict[str, Any]:
        # ranges already page-locked by gitmd in this process (a policy applied earlier): kept at revert
        return {"registered": [a for a, n in self._buffers() if self._registered(target, a, n)]}

    def apply(self, target: Target) -> None:
        done: list[int] = []
        try:
            for a, n in self._buffers():
                self.send(target, (a, n, 0))
                done.append(a)
        except LeverError:
            for a in done:
                self._unregister(target, a)
            raise

    def _unregister(self, target: Target, address: int) -> None:
        # -ENOENT: not registered any more: the program freed it and the guard unregistered it then
        self.send(target, (address, 0, 1), ok=(-errno.ENOENT,))

    def verify(self, target: Target) -> None:
        missing = [hex(a) for a, n in self._buffers() if not self._registered(target, a, n)]
        if missing:
            raise LeverError(f"pin_host_buffer: {', '.join(missing)} not page-locked")

    def revert(self, target: Target, saved: Mapping[str, Any]) -> None:
        keep = {int(a) for a in saved.get("registered", [])}
        for a, _ in self._buffers():
            if a not in keep:
                self._unregister(target, a)


YIELD_EXPIRY_S = 20  # a yield nobody renews lifts itself after this (gitmd renews every few seconds)


class CotenantYield(KnobLever):
    """Make a background co-tenant (a job registered with ``--background``) yield the GPU: its
    shim holds its kernel launches for ``share`` permille of every ``period_ms``, so a foreground job
    held back by it gets the GPU more of the time. Only new work waits (kernels already queued run
    on); nothing the co-tenant computes changes, it only runs slower. Every yield lifts itself after
    YIELD_EXPIRY_S unless gitmd renews it (``Service.renew_yields``): a gitmd that dies leaves no
    co-tenant throttled."""

    name = "cotenant_yield"
    causes = frozenset({"cotenant"})
    op_name = "GITM_KNOB_YIELD"
    why: ClassVar[dict[int, str]] = {
        -errno.EBUSY: "CUPTI gave the shim no subscriber (another one holds the slot, or no driver)"
    }
    defaults = {"share": 750, "period_ms": 100}

    def _pids(self) -> list[int]:
        raw = self.setting.get("pids")
        try:
            pids = [int(p) for p in raw] if isinstance(raw, list) else []
        except (TypeError, ValueError):
            pids = []
        if not pids or any(p <= 0 for p in pids):
            raise LeverError("cotenant_yield: the setting names no co-tenant processes (pids)")
        return pids

    def _share(self) -> int:
        share = int(self.setting_or_default("share"))
        if not 0 < share <= 950:
            raise LeverError("cotenant_yield: share must be 1..950 permille")
        return share

    def _period(self) -> int:
        return int(self.setting_or_default("period_ms"))

    def resources(self) -> frozenset[str]:
        return frozenset({f"yield:{p}" for p in self.setting.get("pids", [])})

    def capture(self, target: Target) -> dict[str, Any]:
        return {"shares": {str(p): self.send(target, (0, 0, 0, 1), pid=p)[0] for p in self._pids()}}

    def apply(self, target: Target) -> None:
        share, period = self._share(), self._period()
        done: list[int] = []
        try:
            for p in self._pids():
                self.send(target, (share, period, YIELD_EXPIRY_S, 0), pid=p)
                done.append(p)
        except LeverError:
            for p in done:
                self.send(target, (0, period, 0, 0), pid=p)
            raise

    def verify(self, target: Target) -> None:
        for p in self._pids():
            now = self.send(target, (0, 0, 0, 1), pid=p)[1]
            if now != self._share():
                raise LeverError(f"cotenant_yield: pid {p} yields {now} permille, not {self._share()}")

    def revert(self, target: Target, saved: Mapping[str, Any]) -> None:
        shares = saved.get("shares", {})
        for p in self._pids():
            if p not in target.rings:
                continue  # the co-tenant ended
            before = int(shares.get(str(p), 0))
            self.send(target, (before, self._period(), YIELD_EXPIRY_S if before else 0, 0), pid=p)
