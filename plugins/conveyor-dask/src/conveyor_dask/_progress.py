"""Progress of Dask work, bridged from the scheduler to ``cv.progress`` callbacks.

Imported only while a ``cv.progress`` block is active. On a cluster, a ``distributed``
progress feed (the one Dask's own progress bars read) counts the finished tasks behind the
awaited futures; the feed runs on the client's event loop, and the waiting thread hands its
latest count to the callbacks, so they run in the thread doing the work, as ``cv.progress``
promises. On the local schedulers a ``dask.callbacks.Callback`` counts tasks as they finish;
dask calls it from the loop in the calling thread, so the callbacks run there too.
"""

from __future__ import annotations

from typing import Any

from dask.callbacks import Callback
from distributed.diagnostics.progressbar import ProgressBar

from conveyor.sdk import report_progress

__all__ = ["Bridge", "LocalBridge"]


class Bridge(ProgressBar):  # type: ignore[misc]  # distributed is untyped here (Any)
    """Counts (done, total) tasks of ``futures`` as the scheduler reports them."""

    def __init__(self, futures: list[Any], client: Any, label: str) -> None:
        super().__init__(futures, scheduler=client.scheduler.address, interval="100ms")
        self.label = label
        self.latest = (0, len(futures))
        self._told: tuple[int, int] | None = None
        client.loop.add_callback(self.listen)

    def _draw_bar(self, remaining: int, all: int, **kwargs: Any) -> None:  # dask names it all
        self.latest = (all - remaining, all)

    def tell(self, finished: bool = False) -> None:
        """Report the latest count to the active callbacks (once per change)."""
        done, total = self.latest
        if finished:
            done = total
        if (done, total) != self._told:
            self._told = (done, total)
            report_progress(done, total, self.label)


class LocalBridge(Callback):  # type: ignore[misc]  # dask is untyped here (Any)
    """Reports (done, total) tasks of a local-scheduler computation as each task finishes."""

    def __init__(self, label: str) -> None:
        super().__init__()
        self.label = label
        self._told: tuple[int, int] | None = None

    def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        done = len(state["finished"])
        pending = sum(len(state[name]) for name in ("ready", "waiting", "running"))
        self._tell(done, done + pending)

    def _finish(self, dsk: Any, state: Any, errored: bool) -> None:
        if not errored and state is not None:
            total = len(state["finished"])
            self._tell(total, total)

    def _tell(self, done: int, total: int) -> None:
        if (done, total) != self._told:
            self._told = (done, total)
            report_progress(done, total, self.label)
