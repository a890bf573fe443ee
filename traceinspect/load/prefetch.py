"""Decoding started before the analysis stack is imported, so that the two overlap.

Importing pandas and the analyses takes about half a second, and a report of one big trace decodes it in worker
processes that used to start only after that import. ``started(files, limits, workers, cache)`` starts the workers
(handed in, ``load/services.py``) first, hands them the pieces of the files the report will cut into pieces, and
yields what it started (a ``Started``, or None) while the import runs. The runner hands that on with its workers
(``Workers.started``); ``decode_files`` collects the pieces it finds started there (``Started.take``) instead of
submitting them again. The columns are the same either way: the same ``decode_range`` on the same byte ranges.
Nothing is kept in this module: what was started lives in the ``Started`` the caller holds.

Only where the work is certain to be wanted: the local executor (the run asks only then), several workers, one
trace file (which the report then cuts into pieces), a plain (uncompressed) file, and no cached columns to read
instead. This module imports only the standard library until it starts, so it costs nothing elsewhere.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    from .limits import Limits
    from .services import ColumnCache, Workers


@dataclass
class Taken:
    """One file's started pieces, taken by the decoder: its plan, the futures of its first ranges, and the pool
    they run on (of ``count`` workers), where the decoder submits the rest."""

    plan: dict
    futures: list
    pool: Any
    count: int
    started: Started

    def done(self) -> None:
        """The file is decoded: once every started file is, the workers stop (``Started.finished``)."""
        self.started.finished()


@dataclass
class Started:
    """The pieces started before the analysis stack was imported: real path -> ((size, mtime), plan, futures), on
    ``pool`` (``count`` workers) of the process ``pid``."""

    pool: Any
    count: int
    pid: int = field(default_factory=os.getpid)
    files: dict[str, tuple[tuple[int, int] | None, dict, list]] = field(default_factory=dict)
    stopped: bool = False

    def take(self, path: str) -> Taken | None:
        """``path``'s started pieces when it was started and is unchanged since; else None (the rest of its pieces
        are for the caller to submit, ``files._decode_planned``)."""
        if self.stopped or self.pid != os.getpid():  # a forked child: the futures are the parent's
            return None
        entry = self.files.pop(os.path.realpath(path), None)
        if entry is None:
            return None
        stamp, plan, futures = entry
        if _stamp(path) != stamp:
            for f in futures:
                f.cancel()
            self.finished()
            return None
        return Taken(plan, futures, self.pool, self.count, self)

    def finished(self) -> None:
        """Once every started file is taken and its pieces collected: the workers are stopped (the analysis may
        fork workers of its own, better without these)."""
        if not self.files and not self.stopped and self.pid == os.getpid():
            self.stopped = True
            self.pool.shutdown(wait=True, cancel_futures=True)

    def close(self) -> None:
        for _, _, futures in self.files.values():
            for f in futures:
                f.cancel()
        self.files.clear()
        self.finished()


@contextmanager
def started(files, limits: Limits, workers: Workers | None = None, cache: ColumnCache | None = None
            ) -> Iterator[Started | None]:
    """Within the block, those of ``files`` (a report's, as listed: ``discover.Listing.files``) that the report
    will decode in pieces are being decoded on ``workers`` (none handed in: nothing starts); a file with columns in
    ``cache`` is read from there instead, so never started. Yields what was started (None: nothing), for the caller
    to hand on with its workers."""
    pre = _start(files, limits, workers, cache) if workers is not None else None
    try:
        yield pre
    finally:
        if pre is not None:
            pre.close()


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def _start(files, limits: Limits, workers: Workers, cache: ColumnCache | None) -> Started | None:
    """Start the workers and submit the pieces; None where nothing is certain to be wanted (or anything fails:
    the report then decodes as it would have, and says what went wrong itself)."""
    if getattr(workers, "started", None) is not None:
        return None
    try:
        n = workers.count
        if n < 2 or not workers.can_fork():
            return None
        from .decode import decode_range, plan_ranges

        files = [str(f) for f in files]
        # One file only: several are decoded whole, one per worker, or rank after rank (started all at once,
        # every rank's columns would wait in memory while the first is analysed).
        if len(files) != 1 or (cache is not None and any(cache.has(Path(f)) for f in files)):
            return None
        plans = {f: plan_ranges(f) for f in files}
    except Exception:  # noqa: BLE001 - no usable files, a missing module...: the report finds out and says so
        return None
    plans = {f: p for f, p in plans.items() if p is not None}
    if not plans:
        return None
    pre = Started(pool=workers.pool(n), count=n)
    first = limits.inflight(n)  # the bound on pieces in flight holds from the first (load/limits.py)
    for f, plan in plans.items():
        futures = [pre.pool.submit(decode_range, f, a, b) for a, b in plan["ranges"][:first]]
        pre.files[os.path.realpath(f)] = (_stamp(f), plan, futures)
    return pre
