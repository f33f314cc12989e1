"""Work done off a pod stream in a few threads, a workflow's in order: the simulated executor's reports and
checkpoint ledger, the node recorder's writes."""

from __future__ import annotations

import queue
import threading
import zlib
from collections.abc import Callable
from typing import Generic, TypeVar

Item = TypeVar("Item")


class Lanes(Generic[Item]):
    """Every item of one workflow goes to the same thread (a stable hash), in the order it was put, so a workflow's
    items keep their order while other workflows' do not wait behind them. `work` handles its own errors: a lane
    that raised would stop."""

    def __init__(self, count: int, work: Callable[[Item], None], name: str) -> None:
        self.queues: list[queue.SimpleQueue[Item]] = [queue.SimpleQueue() for _ in range(count)]
        for number, lane in enumerate(self.queues):
            threading.Thread(target=self._serve, args=(lane, work), name=f"{name} {number}", daemon=True).start()

    @staticmethod
    def _serve(lane: queue.SimpleQueue[Item], work: Callable[[Item], None]) -> None:
        while True:
            work(lane.get())

    def of(self, namespace: str, workflow: str) -> queue.SimpleQueue[Item]:
        """The lane of a workflow (the same in every thread and after a restart)."""
        return self.queues[zlib.crc32(f"{namespace}/{workflow}".encode()) % len(self.queues)]
