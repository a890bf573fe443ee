"""Run the per-rank stage (decode + analyze one rank) where the cores are, then the cross-rank stage and rules.

Per-rank work is independent: with at least as many ranks as cores, whole ranks go to worker processes and only
their small ``RankAnalysis`` summaries come back; with fewer ranks (one big trace), each file is cut into pieces
decoded on all cores instead. ``executor="dask"`` maps the same per-rank task onto a Dask cluster.
"""

from __future__ import annotations

import os
from pathlib import Path

from .analyze import RankAnalysis, Report, analyze_rank, finish
from .config import Config, DEFAULT
from .errors import NoUsableTraceError
from .load import ProgressFn, _pool, _workers, find_trace_files, group_by_rank, load
from .trace import Skipped


def rank_task(files: list[str], config: Config) -> tuple[list[RankAnalysis], list[Skipped]]:
    """Decode and analyze the files of one rank (or of unknown rank); never raises for bad input."""
    one = Config(**{**config.__dict__, "workers": 1})
    trace = load(files, one, allow_empty=True)
    return [analyze_rank(r, one) for r in trace.ranks], trace.skipped


def _world(ranks: list[RankAnalysis]) -> int | None:
    worlds = [r.world_size for r in ranks if r.world_size]
    return max(worlds) if worlds else None


def analyze_local(path: str | os.PathLike, config: Config = DEFAULT, progress: ProgressFn | None = None) -> Report:
    files = find_trace_files(path)
    if not files:
        raise NoUsableTraceError(f"{path}: no trace files (*.json, *.json.gz) found")
    by_rank, unknown = group_by_rank(files)
    groups = [fs for _, fs in sorted(by_rank.items())]
    n = _workers(config)
    if n > 1 and len(groups) >= n and not unknown:
        ranks, skipped = [], []
        sizes = {f: Path(f).stat().st_size for fs in groups for f in fs}
        with _pool(n) as pool:
            futures = [pool.submit(rank_task, fs, config) for fs in groups]
            for fs, fut in zip(groups, futures):
                r, s = fut.result()
                ranks.extend(r)
                skipped.extend(s)
                if progress:
                    for f in fs:
                        progress(f, sizes[f], 0)
        if not ranks:
            reasons = "; ".join(f"{Path(s.file).name}: {s.reason}" for s in skipped[:3])
            raise NoUsableTraceError(f"{path}: no usable trace ({reasons})")
        return finish(str(path), ranks, skipped, _world(ranks), config)
    trace = load(path, config, progress)
    return finish(trace.source, [analyze_rank(r, config) for r in trace.ranks], trace.skipped, trace.world_size, config)
