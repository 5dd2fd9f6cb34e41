"""The Granger tests run in a separate worker process.

statsmodels brings scipy and pandas with it: well over 100 MB the daemon itself should not carry
(its budget is 120 MB), and a numerical library's failure should not take the daemon down. One
spawned worker, started on the first attribution, serves every test after it; if it dies or hangs,
that report says so and the next attribution starts a fresh one.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import threading

import numpy as np

from gitmd.analysis import causality
from gitmd.analysis.causality import GrangerTest


class GrangerWorker:
    def __init__(self, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def _get(self) -> concurrent.futures.ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ProcessPoolExecutor(
                    max_workers=1, mp_context=multiprocessing.get_context("spawn")
                )
            return self._pool

    def __call__(self, targets: dict[str, np.ndarray], causes: dict[str, np.ndarray]) -> list[GrangerTest]:
        pool = self._get()
        try:
            return pool.submit(causality.granger, targets, causes).result(timeout=self.timeout_s)
        except (concurrent.futures.TimeoutError, concurrent.futures.process.BrokenProcessPool):
            self._discard(pool)
            raise

    def _discard(self, pool: concurrent.futures.ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is pool:
                self._pool = None
        for p in list(getattr(pool, "_processes", {}).values()):
            p.kill()
        pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
