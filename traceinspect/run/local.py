"""Run the per-rank stage (decode + analyze one rank) where the cores are, then the cross-rank stage and rules.

Per-rank work is independent: with at least as many ranks as cores, whole ranks go to worker processes and only
their small ``RankAnalysis`` summaries come back; with fewer ranks (one big trace), each file is cut into pieces
decoded on all cores instead. ``executor="dask"`` maps the same per-rank task onto a Dask cluster.
"""

from __future__ import annotations

from pathlib import Path

from dataclasses import replace

from . import cache as _cache, services
from ..analyze.rank import RankAnalysis, analyze_rank
from ..config import RunOptions
from ..errors import NoUsableTraceError
from ..load.discover import Listing
from ..load.limits import Limits
from ..load.reader import plan
from ..load.services import ProgressFn
from .pool import process_pool, worker_count
from .stages import Report, finish, load_with
from ..load.trace import Skipped
from ..thresholds import Thresholds


def rank_task(files: list[str], options: RunOptions, limits: Limits, thresholds: Thresholds,
              progress: ProgressFn | None = None, rank: int | None = None,
              workers: services.ProcessWorkers | None = None) -> tuple[list[RankAnalysis], list[Skipped]]:
    """Decode and analyze the files (windows) of one rank; never raises for bad input.

    The result is cached (in the user cache folder, keyed by the files, the rank, the settings and the code), so a
    second report of an unchanged folder skips decoding and analysis altogether.
    """
    key = _cache.result_key(f"rank{rank}", files, thresholds, limits, options.run) if options.use_cache else None
    hit = _cache.get_rank_result(key, options)
    if hit is not None:
        return hit
    trace = load_with(files, options, limits, progress=progress, allow_empty=True, rank=rank, workers=workers)
    result = ([analyze_rank(r, thresholds, services.rank_fan_out(options, limits)) for r in trace.ranks],
              trace.skipped)
    _cache.put_rank_result(key, result, options)
    return result


def _world(ranks: list[RankAnalysis]) -> int | None:
    worlds = [r.world_size for r in ranks if r.world_size]
    return max(worlds) if worlds else None


def done(source: str, ranks: list, skipped: list[Skipped], runs: dict | None, thresholds: Thresholds) -> Report:
    if not ranks:
        reasons = "; ".join(f"{Path(s.file).name}: {s.reason}" for s in skipped[:3])
        raise NoUsableTraceError(f"{source}: no usable trace ({reasons})")
    return finish(source, ranks, skipped, _world(ranks), thresholds, runs)


def analyze_local(listing: Listing, options: RunOptions, limits: Limits, thresholds: Thresholds,
                  progress: ProgressFn | None = None, workers: services.ProcessWorkers | None = None) -> Report:
    """Report on run ``options.run`` of the listed folder (1 the oldest; the most recent when None) on ``workers``
    (default: the options'; the run hands in its own, with any pieces it started)."""
    work = plan(listing, services.workers(options), limits, options.run)
    groups, skipped = work.groups, work.skipped
    n = worker_count(options)
    sizes = {f: Path(f).stat().st_size for _, fs in groups for f in fs}
    results: list = [None] * len(groups)
    if n > 1 and len(groups) >= n:
        # Enough ranks to keep every core busy: one rank per task, each decoded on one core.
        one = replace(options, workers=1)
        with process_pool(n) as pool:
            futures = [pool.submit(rank_task, fs, one, limits, thresholds, None, r) for r, fs in groups]
            for i, ((_, fs), fut) in enumerate(zip(groups, futures)):
                results[i] = fut.result()
                if progress:
                    for f in fs:
                        progress(f, sizes[f], 0)
    else:
        # Few ranks: one at a time, each file cut into pieces decoded on all cores.
        for i, (r, fs) in enumerate(groups):
            results[i] = rank_task(fs, options, limits, thresholds, progress, r, workers)
    ranks = [r for res in results for r in res[0]]
    skipped = skipped + [s for res in results for s in res[1]]
    return done(work.source, ranks, skipped, work.runs, thresholds)
