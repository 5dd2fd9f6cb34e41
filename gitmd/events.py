"""Fan-out of events to watchers (telemetry samples, job events) through bounded queues.

A slow watcher loses its oldest events and never slows the publisher. A watch is an iterable
that another thread can cancel (when its RPC ends), and that ends when the hub closes.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Subscription(Generic[T]):
    def __init__(self, accept: Callable[[T], bool] | None = None, maxsize: int = 256) -> None:
        self.accept = accept
        self._q: queue.Queue[T | None] = queue.Queue(maxsize=maxsize)
        self.dropped = 0

    def offer(self, item: T) -> None:
        if self.accept is not None and not self.accept(item):
            return
        while True:
            try:
                self._q.put_nowait(item)
                return
            except queue.Full:
                try:
                    self._q.get_nowait()
                    self.dropped += 1
                except queue.Empty:
                    pass

    def close(self) -> None:
        try:
            self._q.put_nowait(None)
        except queue.Full:
            self._q.get_nowait()
            self._q.put_nowait(None)

    def get(self, timeout_s: float) -> T | None:
        """The next item, or None on timeout; raises StopIteration once closed."""
        try:
            item = self._q.get(timeout=timeout_s)
        except queue.Empty:
            return None
        if item is None:
            raise StopIteration
        return item


class Hub(Generic[T]):
    def __init__(self) -> None:
        self._subs: list[Subscription[T]] = []
        self._lock = threading.Lock()

    def publish(self, item: T) -> None:
        with self._lock:
            subs = list(self._subs)
        for sub in subs:
            sub.offer(item)

    def subscribe(self, accept: Callable[[T], bool] | None = None) -> Subscription[T]:
        sub: Subscription[T] = Subscription(accept)
        with self._lock:
            self._subs.append(sub)
        return sub

    def unsubscribe(self, sub: Subscription[T]) -> None:
        with self._lock:
            if sub in self._subs:
                self._subs.remove(sub)

    def subscribers(self) -> int:
        with self._lock:
            return len(self._subs)

    def close_all(self) -> None:
        with self._lock:
            subs, self._subs = self._subs, []
        for sub in subs:
            sub.close()

    def watch(self, alive: threading.Event, accept: Callable[[T], bool] | None = None) -> Watch[T]:
        return Watch(self, self.subscribe(accept), alive)


class Watch(Generic[T]):
    def __init__(
        self, hub: Hub[T], sub: Subscription[T], alive: threading.Event, poll_s: float = 0.5
    ) -> None:
        self._hub = hub
        self._sub = sub
        self._alive = alive
        self._poll_s = poll_s

    def cancel(self) -> None:
        self._sub.close()

    def __iter__(self) -> Iterator[T]:
        try:
            while self._alive.is_set():
                try:
                    item = self._sub.get(self._poll_s)
                except StopIteration:
                    return
                if item is not None:
                    yield item
        finally:
            self._hub.unsubscribe(self._sub)
