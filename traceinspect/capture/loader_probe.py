"""How fast a DataLoader can deliver batches when nothing else runs: its capacity, which no trace shows.

A profile of a GPU-bound step shows the loader's ``__next__`` returning at once: the workers had the whole (slow)
step to make the next batch. Whether they could keep up with a faster step is not in the trace, since the worker
processes are not profiled. So a finding that promises a faster GPU (bf16, fused kernels, fewer launches) could
promise a step the loader cannot feed. :func:`probe_loader` measures that bound before the profiled loop: it
iterates the loader with no training work and times the batches it delivers, workers, pinning thread and
collation included.

The result goes into the trace metadata (``loader_probe``) as a record only: on real captures the probe saw the
loader slower than training drew from it (docs/findings.md), so the report's bound comes from what is timed during
the recorded steps instead: the workers' batches (:class:`LoaderTimer`, ``loader_timing``) and the pinning
thread's CPU time (``threads.ThreadClock``, ``process_threads``).
"""

from __future__ import annotations

import time
from typing import Any

# Rounds of all workers to time after the first one (which includes starting the workers): with W workers the
# batches arrive in bursts of up to W, so a rate is only meaningful over several bursts.
_ROUNDS = 3
_MIN_TIMED = 12
_MAX_SECONDS = 30.0


def probe_loader(loader: Any, *, batches: int | None = None, max_seconds: float = _MAX_SECONDS) -> dict[str, Any]:
    """Iterate ``loader`` with no work per batch and return its delivery period.

    The first round (one batch per worker, or one batch without workers) is skipped: it includes starting the
    worker processes. Then ``batches`` batches (default: 3 rounds of all workers, at least 12) are timed, over as
    many epochs as that takes, stopping early after ``max_seconds``. Consumes batches from fresh iterators, so a
    sampler's shuffle advances as if an epoch had started; run it before the training loop iterates the loader.

    Returns ``{"period_us", "batches", "skipped", "num_workers", "seconds", "method"}``; ``period_us`` is None when
    fewer than two batches could be timed.
    """
    workers = int(getattr(loader, "num_workers", 0) or 0)
    skip = max(workers, 1)
    timed = batches if batches is not None else max(_ROUNDS * max(workers, 1), _MIN_TIMED)
    stamps: list[float] = []
    seen = 0
    start = time.perf_counter()
    deadline = start + max_seconds
    while seen < skip + timed and time.perf_counter() < deadline:
        got_any = False
        it = iter(loader)
        try:
            for _batch in it:
                got_any = True
                seen += 1
                if seen >= skip:  # the skip-th batch closes the first round: the origin of the timed ones
                    stamps.append(time.perf_counter())
                if seen >= skip + timed or time.perf_counter() >= deadline:
                    break
        finally:
            del it  # shuts a non-persistent iterator's workers down now
        if not got_any:
            break  # an empty loader
    period = (stamps[-1] - stamps[0]) / (len(stamps) - 1) * 1e6 if len(stamps) >= 2 else None
    return {
        "period_us": period,
        "batches": max(len(stamps) - 1, 0),
        "skipped": min(seen, skip),  # the first round, whose last batch starts the clock
        "num_workers": workers,
        "seconds": time.perf_counter() - start,
        "method": "batches drawn with no training work, after the workers' first round",
    }


# --------------------------------------------------------------------------- timing the workers during training

_SLOTS = 8192  # batches remembered (a ring): far more than one window's


class _TimedWorkerInit:
    """A ``worker_init_fn`` that makes each worker time every batch it fetches and collates (in that worker only:
    the patch of torch's fetcher happens in the worker process), then runs the loader's own ``worker_init_fn``."""

    def __init__(self, user_init, ring, count) -> None:
        self.user_init, self.ring, self.count = user_init, ring, count

    def __call__(self, worker_id: int) -> None:
        try:
            from torch.utils.data._utils import fetch as torch_fetch
        except ImportError:  # another torch layout: this worker is not timed
            torch_fetch = None
        if torch_fetch is not None:
            for name in ("_MapDatasetFetcher", "_IterableDatasetFetcher"):
                cls = getattr(torch_fetch, name, None)
                if cls is not None and callable(getattr(cls, "fetch", None)):
                    cls.fetch = self._timed(cls.fetch)
        if self.user_init is not None:
            self.user_init(worker_id)

    def _timed(self, fetch):
        ring, count = self.ring, self.count

        def timed_fetch(fetcher, index):
            t0 = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of the machine
            out = fetch(fetcher, index)
            t1 = time.monotonic()
            with count.get_lock():
                i = count.value
                count.value = i + 1
            j = 2 * (i % (len(ring) // 2))
            ring[j], ring[j + 1] = t0, t1
            return out

        return timed_fetch


class LoaderTimer:
    """Times the batches a DataLoader's workers make while the loop trains (fetch and collate, in each worker).

    Installed on the loader before its workers start (it sets ``loader.worker_init_fn``, keeping the loader's own);
    a loader whose workers already run, or one without workers, is not timed (``installed`` is False).
    :meth:`stats` sums the workers' busy time in an interval: the loader's capacity under the real load of training,
    where the pre-loop probe (:func:`probe_loader`) sees an idle machine.
    """

    def __init__(self, loader: Any) -> None:
        import multiprocessing

        self.workers = int(getattr(loader, "num_workers", 0) or 0)
        self.installed = False
        if self.workers <= 0 or getattr(loader, "_iterator", None) is not None:
            return
        ctx = getattr(loader, "multiprocessing_context", None)
        if isinstance(ctx, str):
            ctx = multiprocessing.get_context(ctx)
        ctx = ctx or multiprocessing
        self.ring = ctx.RawArray("d", 2 * _SLOTS)
        self.count = ctx.Value("q", 0)
        try:
            loader.worker_init_fn = _TimedWorkerInit(getattr(loader, "worker_init_fn", None), self.ring, self.count)
        except (AttributeError, ValueError, TypeError):
            return
        self.installed = True

    def stats(self, since: float, until: float | None = None) -> dict[str, Any] | None:
        """The batches finished in [since, until] (``time.monotonic()`` seconds): their count, mean busy time and
        the capacity period ``busy / workers`` (how often the workers could deliver a batch, working without pause)."""
        if not self.installed:
            return None
        until = time.monotonic() if until is None else until
        n = min(self.count.value, _SLOTS)
        busy = [self.ring[2 * i + 1] - self.ring[2 * i] for i in range(n)
                if since <= self.ring[2 * i + 1] <= until and self.ring[2 * i + 1] >= self.ring[2 * i]]
        if not busy:
            return {"batches": 0, "num_workers": self.workers, "busy_us_mean": None, "period_us": None,
                    "busy_share": None, "interval_us": (until - since) * 1e6}
        mean_busy = sum(busy) / len(busy) * 1e6
        return {
            "batches": len(busy),
            "num_workers": self.workers,
            "busy_us_mean": mean_busy,
            "period_us": mean_busy / self.workers,
            # the share of the workers' time spent making batches: near 1, the loader is at its limit
            "busy_share": sum(busy) / (self.workers * (until - since)) if until > since else None,
            "interval_us": (until - since) * 1e6,
            "method": "fetch + collate time of each batch, timed in the worker processes during the profiled steps",
        }
