"""Run the per-rank stage (decode + analyze one rank) where the cores are, then the cross-rank stage and rules.

Per-rank work is independent: with at least as many ranks as cores, whole ranks go to worker processes and only
their small ``RankAnalysis`` summaries come back; with fewer ranks (one big trace), each file is cut into pieces
decoded on all cores instead. ``executor="dask"`` maps the same per-rank task onto a Dask cluster.
"""

from __future__ import annotations

import os
from pathlib import Path

from dataclasses import replace

from . import cache as _cache
from ..analyze.rank import RankAnalysis, analyze_rank
from ..diagnose.engine import Report, finish
from ..config import Config, DEFAULT
from ..errors import NoUsableTraceError
from ..load.reader import ProgressFn, find_trace_files, group_by_rank, load
from .pool import process_pool, worker_count
from ..load.trace import Skipped


def rank_task(files: list[str], config: Config, progress: ProgressFn | None = None
              ) -> tuple[list[RankAnalysis], list[Skipped]]:
    """Decode and analyze the files of one rank (or of unknown rank); never raises for bad input.

    The result is cached (in the user cache folder, keyed by the files, the configuration and the code), so a
    second report of an unchanged folder skips decoding and analysis altogether.
    """
    key = _cache.result_key("rank", files, config) if config.use_cache else None
    hit = _cache.get_rank_result(key, config)
    if hit is not None:
        return hit
    trace = load(files, config, progress=progress, allow_empty=True)
    result = ([analyze_rank(r, config) for r in trace.ranks], trace.skipped)
    _cache.put_rank_result(key, result, config)
    return result


def _world(ranks: list[RankAnalysis]) -> int | None:
    worlds = [r.world_size for r in ranks if r.world_size]
    return max(worlds) if worlds else None


def analyze_local(path: str | os.PathLike, config: Config = DEFAULT, progress: ProgressFn | None = None) -> Report:
    files = find_trace_files(path)
    if not files:
        raise NoUsableTraceError(f"{path}: no trace files (*.json, *.json.gz) found")
    by_rank, unknown = group_by_rank(files)
    groups = [fs for _, fs in sorted(by_rank.items())]
    if unknown:  # ranks are assigned among these files together
        groups.append(unknown)
    n = worker_count(config)
    sizes = {f: Path(f).stat().st_size for fs in groups for f in fs}
    results: list = [None] * len(groups)
    if n > 1 and len(groups) >= n:
        # Enough ranks to keep every core busy: one rank per task, each decoded on one core.
        one = replace(config, workers=1)
        with process_pool(n) as pool:
            futures = [pool.submit(rank_task, fs, one) for fs in groups]
            for i, (fs, fut) in enumerate(zip(groups, futures)):
                results[i] = fut.result()
                if progress:
                    for f in fs:
                        progress(f, sizes[f], 0)
    else:
        # Few ranks: one at a time, each file cut into pieces decoded on all cores.
        for i, fs in enumerate(groups):
            results[i] = rank_task(fs, config, progress)
    ranks = [r for res in results for r in res[0]]
    skipped = [s for res in results for s in res[1]]
    if not ranks:
        reasons = "; ".join(f"{Path(s.file).name}: {s.reason}" for s in skipped[:3])
        raise NoUsableTraceError(f"{path}: no usable trace ({reasons})")
    return finish(str(path), ranks, skipped, _world(ranks), config)
