"""What the run hands the stages below it: worker processes (``run/pool.py``) and the column cache
(``run/cache.py``), as the objects ``load/services.py`` asks for. The stages never import ``run/``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import cache as _cache, pool as _pool
from ..config import RunOptions
from ..load.limits import Limits


@dataclass(frozen=True)
class ProcessWorkers:
    """``load.services.Workers``: process pools from ``run/pool.py``, ``count`` per ``RunOptions.workers``."""

    count: int
    started: object = None  # load.prefetch.Started: a file's pieces already decoding, handed on to the loader

    def pool(self, n: int):
        return _pool.process_pool(n)

    def fork_pool(self, n: int):
        """Workers that rely on memory inherited from this process (``can_fork`` first)."""
        return _pool.process_pool(n, fork_only=True)

    def can_fork(self) -> bool:
        return _pool.can_fork()


def workers(options: RunOptions) -> ProcessWorkers:
    return ProcessWorkers(count=_pool.worker_count(options))


@dataclass(frozen=True)
class ColumnCache:
    """``load.services.ColumnCache``: the decoded columns in ``run/cache.py``'s folder for ``options``."""

    options: RunOptions

    def get(self, path: Path):
        return _cache.get(path, self.options)

    def put(self, path: Path, result) -> None:
        _cache.put(path, result, self.options)

    def has(self, path: Path) -> bool:
        return _cache.has_columns(path, self.options)


def column_cache(options: RunOptions) -> ColumnCache | None:
    """The column cache, or None with ``use_cache`` off."""
    return ColumnCache(options) if options.use_cache else None


def started(files, options: RunOptions, limits: Limits):
    """``load.prefetch.started`` for the listed ``files`` on this run's workers and column cache: with the local
    executor only (a cluster decodes elsewhere)."""
    from ..load.prefetch import started as decoding

    local = options.executor == "local" and not options.scheduler
    return decoding(files, limits, workers(options) if local else None, column_cache(options))


# A rank this big runs its analyses on several cores (forked workers share its events copy-on-write).
PARALLEL_MIN_EVENTS = 100_000
# What an analysis part allocates per event of its rank, at most (measured with tracemalloc: up to 39 bytes on the
# public A100 trace, 58 on a 900k-event scaled copy of it, where a lookup table of ids of up to 32 MiB counts too;
# tests/load/test_spill.py holds every part under it): each forked worker holds its own, so a rank whose parts would
# pass half of Limits.memory_limit_bytes side by side runs them one by one.
PART_BYTES_PER_EVENT = 80

_FORKED: list = []  # the parts forked workers see (set in the parent just before the fork)


def _part_in_child(i: int):
    return _FORKED[0][i]()


def rank_fan_out(options: RunOptions, limits: Limits):
    """``analyze.rank.FanOut``: a big rank's parts side by side, a small rank's one after the other here; the
    results in the parts' order.

    Side by side, every part but the first is handed to forked workers, and this process, once it has run the
    first, takes back from the end of the queue the parts no worker has started yet and runs them itself: the
    workers work from the front and this process from the back until they meet, so neither waits on a split fixed
    in advance (with one worker the two share the parts; with a worker for every part this process runs the first
    alone)."""
    w = workers(options)

    def fan_out(parts, events: int) -> list:
        processes = min(w.count, len(parts))  # this one and its workers, each holding one part at a time
        if (processes < 2 or events < PARALLEL_MIN_EVENTS or not w.can_fork()
                or processes * events * PART_BYTES_PER_EVENT > limits.memory_limit_bytes // 2):
            return [p() for p in parts]
        _FORKED.append(list(parts))
        try:
            with w.fork_pool(processes - 1) as pool:
                futures = {i: pool.submit(_part_in_child, i) for i in range(1, len(parts))}
                out = {0: parts[0]()}
                for i in range(len(parts) - 1, 0, -1):
                    if futures[i].cancel():  # no worker has started it: run it here
                        out[i] = parts[i]()
                return [out[i] if i in out else futures[i].result() for i in range(len(parts))]
        finally:
            _FORKED.clear()

    return fan_out
