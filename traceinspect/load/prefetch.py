"""Decoding started before the analysis stack is imported, so that the two overlap.

Importing pandas and the analyses takes about half a second, and a report of one big trace decodes it in worker
processes that used to start only after that import. ``started(path, config, workers, cache)`` starts the workers
(handed in, ``load/services.py``) first, hands them
the pieces of the files the report will cut into pieces, and the import runs meanwhile; ``decode_file`` then
collects the pieces it finds started (``take``) instead of submitting them again. The columns are the same either
way: the same ``decode_range`` on the same byte ranges.

Only where the work is certain to be wanted: the local executor with several workers, one trace file (which the
report then cuts into pieces), a plain (uncompressed) file, and no cached columns to read instead. This module
imports only the standard library until it starts, so it costs nothing elsewhere.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    from .services import ColumnCache, Workers

_STARTED: dict[str, tuple[tuple[int, int], dict, list]] = {}  # real path -> ((size, mtime), plan, futures)
_POOL: list = []  # [(the workers, the pid of the process that started them, their count)] while they run


@contextmanager
def started(path, config, workers: Workers | None = None, cache: ColumnCache | None = None) -> Iterator[None]:
    """Within the block, the files ``path``'s report will decode in pieces are being decoded on ``workers`` (none
    handed in: nothing starts); a file with columns in ``cache`` is read from there instead, so never started."""
    if workers is not None and _start(path, config, workers, cache):
        try:
            yield
        finally:
            for _, _, futures in _STARTED.values():
                for f in futures:
                    f.cancel()
            _STARTED.clear()
            finished()
    else:
        yield


def finished() -> None:
    """Once every started file is taken and its pieces collected: the workers are stopped (the analysis may fork
    workers of its own, better without these)."""
    if _POOL and not _STARTED and _POOL[0][1] == os.getpid():
        _POOL.pop()[0].shutdown(wait=True, cancel_futures=True)


def take(path: str) -> tuple[dict, list, Any, int] | None:
    """(plan, futures, the workers' pool, their count) of ``path`` when its first pieces were started and the file
    is unchanged since; else None. The rest of its pieces are for the caller to submit (``files._decode_planned``)."""
    if not _POOL or _POOL[0][1] != os.getpid():  # none started, or a forked child: the futures are the parent's
        return None
    entry = _STARTED.pop(os.path.realpath(path), None)
    if entry is None:
        return None
    stamp, plan, futures = entry
    if _stamp(path) != stamp:
        for f in futures:
            f.cancel()
        return None
    return plan, futures, _POOL[0][0], _POOL[0][2]


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def _start(path, config, workers: Workers, cache: ColumnCache | None) -> bool:
    """Start the workers and submit the pieces; False where nothing is certain to be wanted (or anything fails:
    the report then decodes as it would have, and says what went wrong itself)."""
    if config.executor != "local" or config.scheduler or _POOL:
        return False
    try:
        n = workers.count
        if n < 2 or not workers.can_fork():
            return False
        from .decode import decode_range, plan_ranges
        from .discover import find_trace_files
        from .limits import Limits

        files = [str(f) for f in find_trace_files(path)]
        # One file only: several are decoded whole, one per worker, or rank after rank (started all at once,
        # every rank's columns would wait in memory while the first is analysed).
        if len(files) != 1 or (cache is not None and any(cache.has(Path(f)) for f in files)):
            return False
        plans = {f: plan_ranges(f) for f in files}
    except Exception:  # noqa: BLE001 - no usable files, a missing module...: the report finds out and says so
        return False
    plans = {f: p for f, p in plans.items() if p is not None}
    if not plans:
        return False
    pool = workers.pool(n)
    _POOL.append((pool, os.getpid(), n))
    first = Limits.of(config).inflight(n)  # the bound on pieces in flight holds from the first (load/limits.py)
    for f, plan in plans.items():
        futures = [pool.submit(decode_range, f, a, b) for a, b in plan["ranges"][:first]]
        _STARTED[os.path.realpath(f)] = (_stamp(f), plan, futures)
    return True

