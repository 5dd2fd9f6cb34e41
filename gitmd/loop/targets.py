"""What a live lever acts on in a running job: its processes, their rings, its stream, its hot
buffers, its CPUs, its background co-tenants; and the lever made for it (live_lever)."""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np

from gitmd.analysis.causes import starved_stream
from gitmd.analysis.hostbuffers import HotBuffer, hot_pageable_buffers, to_pin
from gitmd.capture.windows import ProcessWindow
from gitmd.errors import GitmdError, NotFoundError
from gitmd.jobs.registry import Job
from gitmd.levers.base import Lever, LeverError, Target
from gitmd.levers.host import active_threads, affinity_size, gpu_local_cpus, quiet_cpus
from gitmd.levers.registry import make as make_lever
from gitmd.levers.shim_knobs import AllocKeepCacheLive, SyncSpin
from gitmd.loop.deps import Deps

log = logging.getLogger(__name__)


class Targets:
    def __init__(self, d: Deps) -> None:
        self.d = d

    def pids(self, job_id: str) -> tuple[int, ...]:
        if self.d.capture is None:
            return ()
        return tuple(st.pid for st, alive in self.d.capture.processes(job_id) if alive)

    def target(self, job_id: str) -> Target:
        d = self.d
        job = d.jobs.get(job_id)
        rings = d.capture.ring_paths(job_id) if d.capture is not None else {}
        others: dict[int, int] = {}
        for bg in self.background_cotenants(job):
            for pid, path in d.capture.ring_paths(bg.id).items() if d.capture is not None else ():
                rings.setdefault(pid, path)
                others[pid] = bg.uid
        return Target(job_id=job_id, pids=self.pids(job_id), rings=rings, owner_uid=job.uid, ring_uids=others)

    def background_cotenants(self, job: Job) -> list[Job]:
        """Running jobs registered as background that share a GPU with ``job`` (a job that named
        no GPUs shares them all) and have live captured processes."""
        if self.d.capture is None or job.background:
            return []
        out = []
        for other in self.d.jobs.list(include_exited=False):
            if other.id == job.id or not other.background:
                continue
            if job.gpus and other.gpus and not set(job.gpus) & set(other.gpus):
                continue
            if self.pids(other.id) and self.d.capture.ring_paths(other.id):
                out.append(other)
        return out

    def near_cpus(self, job: Job) -> set[int]:
        """The CPUs near the job's GPUs (all of them when it did not say which)."""
        local: set[int] = set()
        for g in self.d.gpus:
            if not job.gpus or g.index in job.gpus:
                local |= gpu_local_cpus(g.pci_bus_id)
        return local

    def exec_cpus(self, job: Job, start: tuple[int, ...], items: list[dict[str, Any]]) -> tuple[int, ...]:
        """A validated cpu_affinity policy, set by the launcher before exec: quiet CPUs near the GPU,
        chosen now as the live lever chooses them (among gitmd's CPUs, not only the ones the job
        was started on: a job squeezed onto busy cores is moved off them), as many as it takes (2-8,
        by ``start``, the launcher's affinity). Applied from the job's first instruction, as the oracle
        runs it (taskset), not a duty tick after its first CUDA call (contended, H200 2026-12-03:
        policy runs 0.118-0.136 ms/step against the oracle's 0.078-0.089: their import and first
        steps ran on the contended cores). Noted on the policy's pending item (``at_exec``), so the
        tick sets the same CPUs when the launcher did not."""
        item = next((x for x in items if x.get("lever") == "cpu_affinity"), None)
        start = tuple(c for c in start if c < (os.cpu_count() or 0))  # CPUs this host has
        if item is None or not start:
            return ()
        try:
            # as many as the trial that validated it gave the job (it had as many working threads)
            validated = len((item.get("setting") or {}).get("cpus") or ())
            n = max(2, min(len(start), 8), min(validated, os.cpu_count() or 1))
            cpus = quiet_cpus(n, prefer=self.near_cpus(job), interval_s=0.1, load=self.d.cpu_load)
        except OSError:
            return ()
        if not cpus or cpus == set(start):
            return ()
        item["at_exec"], item["started_on"] = sorted(cpus), sorted(start)
        return tuple(sorted(cpus))

    def live_lever(self, name: str, job: Job) -> Lever | None:
        """The live lever ``name`` made for what it would act on in the job now; None when there is
        nothing (no process, no such stream, buffer or co-tenant, no root for a priority)."""
        pids = self.pids(job.id)
        if not pids:
            return None
        if name == "sched_priority":
            return make_lever("sched_priority", nice=-5) if os.geteuid() == 0 else None
        if name == "cpu_affinity":
            try:
                current = os.sched_getaffinity(pids[0])
            except OSError:
                return None
            # as many CPUs as its working threads at least: squeezing them below that only queues
            # its own work (the same count elsewhere still moves it off busy cores)
            n = affinity_size(len(current), active_threads(pids), len(os.sched_getaffinity(0)))
            cpus = quiet_cpus(n, prefer=self.near_cpus(job), load=self.d.cpu_load)
            if not cpus or set(cpus) == current:
                return None
            return make_lever("cpu_affinity", cpus=sorted(cpus))
        if name == "pin_host_buffer":
            return self._pin(job)
        if name == "cotenant_yield":
            capture = self.d.capture
            if capture is None:
                return None
            bg = self.background_cotenants(job)
            yielding = sorted(p for b in bg for p in set(self.pids(b.id)) & set(capture.ring_paths(b.id)))
            if not yielding:
                return None
            jobs = [b.id for b in bg]
            return make_lever("cotenant_yield", pids=yielding, jobs=jobs, share=750, period_ms=100)
        if name == "alloc_keep_cache_live":
            return self.keep_cache(job)
        if name in ("stream_priority", "mempool_release", "sync_spin"):
            main = self.busiest(job, "kernels")  # the one whose stream the cause names
            if main is None:
                return None
            if name == "stream_priority":
                cost, stream, _ = starved_stream(main.records)
                if cost <= 0:
                    return None
                return make_lever("stream_priority", pid=main.pid, stream=stream, priority=-5)
            devices = main.records.kernels["device"]
            device = int(np.bincount(devices).argmax()) if len(devices) else 0
            if name == "sync_spin":
                return self.sync_spin(job, main.pid, device)
            return make_lever("mempool_release", pid=main.pid, device=device)
        return None

    def _pin(self, job: Job) -> Lever | None:
        st = self.d.states.get(job.id)
        window = st.newest if st is not None else None
        if window is None or self.d.capture is None:
            return None
        rings = self.d.capture.ring_paths(job.id)
        best: tuple[int, int, list[HotBuffer]] | None = None
        for p in window.processes:
            if p.pid not in rings:
                continue
            pin = to_pin(hot_pageable_buffers(p.records))
            saving = sum(b.pageable_ns for b in pin)
            if pin and (best is None or saving > best[0]):
                best = (saving, p.pid, pin)
        if best is None:
            return None
        _, pid, pin = best
        return make_lever("pin_host_buffer", pid=pid, buffers=[[b.address, b.bytes] for b in pin])

    def busiest(self, job: Job, kind: str) -> ProcessWindow | None:
        """The job's live captured process with the most records of ``kind`` (kernels, memory) in
        its newest window; None without a window or such a process."""
        st = self.d.states.get(job.id)
        window = st.newest if st is not None else None
        if window is None or self.d.capture is None:
            return None
        rings = self.d.capture.ring_paths(job.id)
        procs = [p for p in window.processes if p.pid in rings and len(getattr(p.records, kind))]
        return max(procs, key=lambda p: len(getattr(p.records, kind))) if procs else None

    def keep_cache(self, job: Job) -> Lever | None:
        """The job's process whose gitmd hook has read the keep-cache flag most (it calls
        torch.cuda.empty_cache() under GITMD_LIVE_FLAGS), asked through each process's shim: no
        window needed. None when no hook reads it: a flag nobody reads would change nothing, and the
        launch form is then tried across runs instead."""
        target = self.target(job.id)
        best: tuple[int, Lever] | None = None
        for pid in self.pids(job.id):
            if pid not in target.rings:
                continue
            lever = make_lever("alloc_keep_cache_live", pid=pid)
            assert isinstance(lever, AllocKeepCacheLive)
            try:
                _, reads = lever.read(target)
            except LeverError as e:
                log.debug("job %s: alloc_keep_cache_live: %s", job.id, e)
                continue
            if reads and (best is None or reads > best[0]):
                best = (reads, lever)
        if best is None:
            log.debug("job %s: alloc_keep_cache_live: no hook in its processes reads the flag", job.id)
            return None
        return best[1]

    def sync_spin(self, job: Job, pid: int, device: int) -> Lever | None:
        """Only a context that sleeps in its synchronizations (yield or blocking sync) can gain:
        auto already spins while the host has more cores than contexts."""
        lever = make_lever("sync_spin", pid=pid, device=device, sched=SyncSpin.SPIN)
        assert isinstance(lever, SyncSpin)
        try:
            now = lever.current(self.target(job.id))
        except LeverError as e:
            log.info("job %s: sync_spin not tried: %s", job.id, e)
            return None
        return lever if now in SyncSpin.SLEEPING else None

    def renew_yields(self) -> None:
        """Every few seconds: the co-tenant yields in force are renewed (each lifts itself
        YIELD_EXPIRY_S after its last renewal); one whose foreground job ended is reverted."""
        ivs = self.d.interventions
        for iv in ivs.in_force("cotenant_yield"):
            try:
                job = self.d.jobs.get(iv.job_id)
            except NotFoundError:
                job = None
            try:
                if job is None or job.state not in ("registered", "running"):
                    if iv.state == "promoted":
                        ivs.unpromote(iv.id)
                    ivs.revert(iv.id, "the job it yielded to ended")
                    continue
                lever = make_lever(iv.lever, **iv.setting)
                lever.apply(ivs.rebuild(iv.target))
            except (LeverError, GitmdError) as e:
                log.info("co-tenant yield %d: %s", iv.id, e)
