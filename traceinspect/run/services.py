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

_FORKED: list = []  # (parts, counter): what forked workers see (set in the parent just before the fork)


def _claimed(parts, counter):
    """The indices of ``parts`` this process claims, one at a time, from the ``counter`` every process shares."""
    while True:
        with counter.get_lock():
            i = counter.value
            if i >= len(parts):
                return
            counter.value = i + 1
        yield i


def _parts_in_child() -> list:
    parts, counter = _FORKED[0]
    return [(i, parts[i]()) for i in _claimed(parts, counter)]


def rank_fan_out(options: RunOptions, limits: Limits):
    """``analyze.rank.FanOut``: a big rank's parts side by side, a small rank's one after the other here; the
    results in the parts' order.

    Side by side, this process and its forked workers each claim the next part nobody has claimed yet from a
    counter they share, run it, and claim again until none is left: a process that finishes early takes the next
    part instead of waiting on a split fixed in advance, so with the parts handed in heaviest first (as
    ``analyze_rank`` orders them) the processes end close together. This process, which needs no start, mostly
    claims the first (heaviest) part, and keeps the results of what it ran without sending them through a pipe."""
    w = workers(options)

    def fan_out(parts, events: int) -> list:
        processes = min(w.count, len(parts))  # this one and its workers, each holding one part at a time
        if (processes < 2 or events < PARALLEL_MIN_EVENTS or not w.can_fork()
                or processes * events * PART_BYTES_PER_EVENT > limits.memory_limit_bytes // 2):
            return [p() for p in parts]
        import multiprocessing as mp

        counter = mp.get_context("fork").Value("i", 0)
        _FORKED.append((list(parts), counter))
        try:
            with w.fork_pool(processes - 1) as pool:
                futures = [pool.submit(_parts_in_child) for _ in range(processes - 1)]
                out = {i: parts[i]() for i in _claimed(parts, counter)}
                for f in futures:
                    out.update(f.result())
                return [out[i] for i in range(len(parts))]
        finally:
            _FORKED.clear()

    return fan_out
