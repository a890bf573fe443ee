"""Paths -> ``Trace``: list every rank's trace files (``discover.list_traces``), plan the folder's runs (``plan``:
the one planner, of the API, the CLI and both executors), decode the files (in the worker processes handed in,
through the column cache handed in), group them by rank.

Bad files degrade one at a time: each becomes a ``Skipped`` entry with a one-line reason and the rest loads.
``files`` decodes one file, ``assemble`` makes the ranks; the pools and the cache come from the caller
(``load/services.py``), never from ``run/``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from ..errors import NoUsableTraceError, TraceFileError, UsageError
from .assemble import assemble as _assemble, group_results as _group_by_rank
from .discover import Listing, list_traces, no_traces
from .files import FileResult, decode_file, decode_files  # noqa: F401  (re-exported: the reader's API)
from .limits import DEFAULT_LIMITS, Limits
from .peek import peek
from .runs import RunPlan, plan_runs, runs_dict
from .services import IN_PROCESS, ColumnCache, ProgressFn, Workers
from .trace import Skipped, Trace

__all__ = ["FileResult", "Plan", "ProgressFn", "decode_file", "decode_files", "list_traces", "load", "plan",
           "plan_folder", "select_run"]


def plan_folder(files: list, workers: Workers = IN_PROCESS, limits: Limits = DEFAULT_LIMITS
                ) -> tuple[RunPlan, list[Skipped]]:
    """Peek at every file (in parallel on ``workers`` when there are several) and decide runs, ranks and windows.

    Returns the plan and the files that could not be read at all (each with its one-line reason).
    """
    paths = [str(f) for f in files]
    n = min(workers.count, len(paths))
    if n > 1:
        with workers.pool(n) as pool:
            facts = list(pool.map(peek, paths, [limits] * len(paths)))
    else:
        facts = [peek(p, limits) for p in paths]
    bad = [Skipped(file=f.path, reason=f.error) for f in facts if f.error is not None]
    return plan_runs(facts), bad


def select_run(plan: RunPlan, run: int | None, source: str):
    chosen = plan.select(run)
    if chosen is None and plan.runs:
        raise UsageError(f"{source}: --run {run} does not exist (runs 1-{len(plan.runs)}, 1 the oldest)")
    return chosen


@dataclass
class Plan:
    """What a report of a listed folder reads: the chosen run's (rank, window files) groups, the files it does not
    read (passed over, unreadable, copies) each with its reason, and the report's ``runs`` object (None: no run)."""

    source: str
    groups: list[tuple[int, list[str]]]
    skipped: list[Skipped]
    runs: dict | None


def plan(listing: Listing, workers: Workers = IN_PROCESS, limits: Limits = DEFAULT_LIMITS, run: int | None = None,
         resolve: bool = False) -> Plan:
    """The plan of run ``run`` of the listed files (1 the oldest; None: the most recent), their heads read on
    ``workers``; ``resolve``: the files by their absolute paths (for workers elsewhere). A listing without trace
    files is a ``NoUsableTraceError`` naming what was passed over; a run that does not exist a ``UsageError``."""
    if not listing.files:
        raise no_traces(listing.source, listing.passed_over)
    files = [f.resolve() for f in listing.files] if resolve else list(listing.files)
    runs, bad = plan_folder(files, workers, limits)
    skipped = [Skipped(file=f, reason=r) for f, r in listing.passed_over] + bad + runs.skipped
    chosen = select_run(runs, run, listing.source)
    if chosen is None:
        return Plan(listing.source, [], skipped, None)
    return Plan(listing.source, [(p.rank, p.files) for p in chosen.processes], skipped, runs_dict(runs, chosen))


def load(
    path: str | os.PathLike | Iterable,
    limits: Limits = DEFAULT_LIMITS,
    progress: ProgressFn | None = None,
    allow_empty: bool = False,
    run: int | None = None,
    rank: int | None = None,
    *,
    workers: Workers = IN_PROCESS,
    cache: ColumnCache | None = None,
) -> Trace:
    """Load the trace files under ``path`` into a ``Trace``, decoding on ``workers`` and reading and filling the
    column ``cache`` (both handed in by the caller, ``run/services.py``: left out, one process and no cache), within
    ``limits`` (the only settings the load stage reads).

    A folder (or a file) is one run or several: the most recent run is loaded, or run number ``run`` (1 the oldest;
    ``trace.runs`` says what was decided). A list of files is loaded as given: grouped by the rank each names, or
    all as windows of rank ``rank``. Raises ``NoUsableTraceError`` when nothing could be loaded; otherwise unusable
    files are in ``trace.skipped``.
    """
    skipped: list[Skipped] = []
    runs_info = None
    groups_paths: list[tuple[int | None, list[str]]]
    if isinstance(path, (str, os.PathLike)):
        work = plan(list_traces(path), workers, limits, run)
        source, groups_paths, runs_info = work.source, work.groups, work.runs
        skipped.extend(work.skipped)
    else:
        files = [Path(p) for p in path]
        source = ", ".join(str(p) for p in files)
        if not files:
            raise NoUsableTraceError(f"{source}: no trace files (*.json, *.json.gz) found")
        groups_paths = [(rank, [str(f) for f in files])]
    all_paths = [f for _, fs in groups_paths for f in fs]
    decoded, more = _decode_all(all_paths, workers, cache, progress, limits)
    skipped.extend(more)
    if not decoded:
        if allow_empty:
            return Trace(source=source, ranks=[], skipped=skipped, runs=runs_info)
        reasons = "; ".join(f"{Path(s.file).name}: {s.reason}" for s in skipped[:3])
        raise NoUsableTraceError(f"{source}: no usable trace ({reasons})")
    groups: list[tuple[int, list[FileResult]]] = []
    for r, fs in groups_paths:
        frs = sorted((decoded[f] for f in fs if f in decoded), key=lambda x: x.path)
        if not frs:
            continue
        groups.extend([(r, frs)] if r is not None else _group_by_rank(frs))
    ranks, more_skipped = _assemble(groups, limits.max_world_size)
    skipped.extend(more_skipped)
    worlds = [r.world_size for r in ranks if r.world_size]
    world = max(worlds) if worlds else None
    return Trace(source=source, ranks=ranks, skipped=skipped, world_size=world, runs=runs_info)


def _decode_all(paths: list[str], workers: Workers, cache: ColumnCache | None, progress: ProgressFn | None,
                limits: Limits = DEFAULT_LIMITS
                ) -> tuple[dict[str, FileResult], list[Skipped]]:
    """path -> FileResult of every usable file (from the column cache where it has them), and the others' reasons."""
    results: dict[str, FileResult] = {}
    skipped: list[Skipped] = []
    to_decode = []
    for f in paths:
        hit = cache.get(Path(f)) if cache is not None else None
        if hit is not None:
            results[f] = hit
        else:
            to_decode.append(f)
    for p, res in zip(to_decode, decode_files(to_decode, workers, progress, limits)):
        if isinstance(res, TraceFileError):
            skipped.append(Skipped(file=res.path, reason=res.reason))
            continue
        if res.columns["n"] == 0:
            skipped.append(Skipped(file=p, reason="no usable trace events (no complete 'X' events of a known kind)"))
            continue
        if cache is not None:
            cache.put(Path(p), res)
        results[p] = res
    return results, skipped
