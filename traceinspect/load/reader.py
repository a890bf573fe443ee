"""Files -> ``Trace``: find every rank's trace files, decode them into columns (in parallel), group by rank.

Bad files degrade one at a time: each becomes a ``Skipped`` entry with a one-line reason and the rest loads.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

import numpy as np

from ..run import cache as _cache
from ..run.pool import process_pool as _pool, worker_count as _workers  # pools are made in one place
from ..config import Config, DEFAULT
from .discover import find_trace_files
from .decode import (NUM_COLS, RAW_COLS, STR_COLS, decode_meta, decode_piece, decode_range, decode_whole, plan_ranges,
                     read_pieces)
from ..errors import NoUsableTraceError, TraceFileError, UsageError
from . import meta as M, prefetch
from .limits import DEFAULT_LIMITS, FinalFileError, Limits
from .peek import peek
from .runs import RunPlan, plan_runs, runs_dict
from .trace import RankTrace, Skipped, Trace

if TYPE_CHECKING:
    import pandas as pd

ProgressFn = Callable[[str, int, int], None]  # (file, bytes done in this call, total bytes of all files)


@dataclass
class FileResult:
    path: str
    meta: dict
    columns: dict  # column name -> np.ndarray, or list for a text column read from the cache
    nbytes: int


def _concat_pieces(pieces: list[dict]) -> dict:
    """Merge per-piece columns, unifying each piece's string table into one categorical.

    Column by column, dropping each piece's copy as soon as it is merged: the peak is one file's columns plus one
    column, not two copies of everything.
    """
    out: dict = {}
    n = sum(p["n"] for p in pieces)
    for col in NUM_COLS:
        out[col] = np.concatenate([p.pop(col) for p in pieces]) if pieces else np.empty(0)
    for col in STR_COLS:
        table: dict = {}
        parts = []
        for p in pieces:
            codes, strings = p.pop(col)
            remap = np.array([table.setdefault(s, len(table)) for s in strings] + [-1], dtype=np.int32)
            parts.append(remap[codes])  # code -1 picks the trailing -1
        codes = np.concatenate(parts) if parts else np.empty(0, np.int32)
        out[col] = (codes, list(table))
    for col in RAW_COLS:  # object arrays (None where a piece has none)
        if any(p[col] is not None for p in pieces):
            out[col] = np.concatenate([p[col] if p[col] is not None else np.empty(p["n"], object) for p in pieces])
        else:
            out[col] = None
    out["n"] = n
    return out


def decode_file(path: str, pool: ProcessPoolExecutor | None = None, progress: ProgressFn | None = None,
                limits: Limits = DEFAULT_LIMITS) -> FileResult:
    """Decode one file into columns: cut into pieces at Kineto's event boundaries (decoded in ``pool`` when given),
    or, when the file is laid out otherwise (any other valid JSON), decoded whole, with the same result."""
    try:
        return _decode_cut(path, pool, progress, limits)
    except FinalFileError:  # past a limit (load/limits.py): reading it whole would not get further
        raise
    except (TraceFileError, ValueError, TypeError) as first:
        try:
            cols, meta, nbytes = decode_whole(path, limits=limits)
        except TraceFileError as second:
            raise (first if isinstance(first, TraceFileError) else second) from None
        return FileResult(path=path, meta=meta, columns=cols, nbytes=nbytes)


def _decode_cut(path: str, pool: ProcessPoolExecutor | None = None, progress: ProgressFn | None = None,
                limits: Limits = DEFAULT_LIMITS) -> FileResult:
    started = prefetch.take(path)
    if started is not None:  # its pieces are being decoded already (load/prefetch.py)
        return _decode_planned(path, started[0], None, progress, started[1])
    plan = plan_ranges(path, limits=limits)
    if plan is not None:
        return _decode_planned(path, plan, pool, progress)
    pieces_iter, info = read_pieces(path, limits=limits)
    results: list = []
    inflight: list[Future] = []
    limit = 2 * (pool._max_workers if pool is not None else 1)  # noqa: SLF001 - a public-enough attribute
    done_bytes = 0
    try:
        for piece in pieces_iter:
            if progress:
                progress(path, len(piece), 0)
            done_bytes += len(piece)
            if pool is None:
                results.append(decode_piece(piece))
                continue
            inflight.append(pool.submit(decode_piece, piece))
            if len(inflight) >= limit:
                results.append(inflight.pop(0).result())
        for fut in inflight:
            results.append(fut.result())
    except TraceFileError:
        raise
    except (ValueError, TypeError) as exc:  # msgspec.DecodeError is a ValueError
        raise TraceFileError(path, f"invalid JSON in traceEvents ({_short(exc)})") from None
    meta = decode_meta(info["header"], info["trailer"], path)
    columns = _concat_pieces(results)
    return FileResult(path=path, meta=meta, columns=columns, nbytes=info["bytes"])


def _decode_planned(path: str, plan: dict, pool: ProcessPoolExecutor | None, progress: ProgressFn | None,
                    futures: list[Future] | None = None) -> FileResult:
    """A plain file cut into byte ranges that the workers (or this process, without a pool) read themselves;
    ``futures``: the ranges submitted already."""
    if futures is None and pool is not None:
        futures = [pool.submit(decode_range, path, a, b) for a, b in plan["ranges"]]
    results = []
    try:
        for i, (a, b) in enumerate(plan["ranges"]):
            results.append(futures[i].result() if futures is not None else decode_range(path, a, b))
            if progress:
                progress(path, b - a, 0)
    except (ValueError, TypeError) as exc:
        raise TraceFileError(path, f"invalid JSON in traceEvents ({_short(exc)})") from None
    finally:
        prefetch.finished()
    meta = decode_meta(plan["header"], plan["trailer"], path)
    return FileResult(path=path, meta=meta, columns=_concat_pieces(results), nbytes=plan["bytes"])


def _short(exc: Exception) -> str:
    return str(exc).splitlines()[0][:120]


def _decode_file_task(path: str, pool: ProcessPoolExecutor | None = None, progress: ProgressFn | None = None,
                      limits: Limits = DEFAULT_LIMITS) -> FileResult | TraceFileError:
    """Decode one file; every failure becomes a TraceFileError value naming the file (never a crash)."""
    try:
        return decode_file(path, pool, progress, limits)
    except TraceFileError as exc:
        return exc
    except MemoryError:
        return TraceFileError(path, "out of memory while decoding")
    except OSError as exc:
        return TraceFileError(path, f"cannot read ({exc.strerror or exc})")
    except Exception as exc:  # noqa: BLE001 - one odd file must not stop the others
        return TraceFileError(path, f"could not be decoded ({type(exc).__name__}: {_short(exc)})")


# --------------------------------------------------------------------------------------------------------------


def _frame(cols: dict, window: int, shift_us: float) -> pd.DataFrame:
    """Columns -> DataFrame without copying the numeric arrays; categoricals from their codes."""
    import pandas as pd  # here, not above: planning and decoding a folder need no pandas (load/prefetch.py)

    n = cols["n"]
    data: dict = {c: cols[c] for c in NUM_COLS}
    if shift_us:
        data["ts"] = data["ts"] + shift_us
    for col in STR_COLS:
        codes, strings = cols[col]
        data[col] = pd.Categorical.from_codes(codes, categories=pd.Index(strings, dtype=object), validate=False) \
            if strings else pd.Categorical.from_codes(np.full(n, -1, np.int8), categories=pd.Index([], dtype=object))
    for col in RAW_COLS:
        raw = cols[col]
        if isinstance(raw, np.ndarray):  # decoded: an object array already
            arr = raw
        else:  # from the cache (a list) or absent
            arr = np.empty(n, dtype=object)  # all None
            if raw is not None:
                arr[:] = raw
        data[col] = pd.Series(arr, dtype=object, copy=False)  # object, not str: None stays None
    data["window"] = np.full(n, window, np.int16)
    return pd.DataFrame(data, copy=False)


def _rank_of(meta: dict, path: str) -> int | None:
    return M.rank_of(meta, path)


def _device_info(meta: dict, events: pd.DataFrame) -> tuple[str | None, tuple[int, int] | None]:
    gpu_pids = events.loc[events["kind"] >= 5, "pid"]
    dev_id = int(gpu_pids.mode().iloc[0]) if len(gpu_pids) else None
    return M.device_info(meta, dev_id)


def _group_by_rank(results: list[FileResult]) -> list[tuple[int, list[FileResult]]]:
    """Files given as a list (not a folder): group by the rank each names; files naming none get free ranks."""
    by_rank: dict[int, list[FileResult]] = {}
    unranked: list[FileResult] = []
    for fr in results:
        r = _rank_of(fr.meta, fr.path)
        (by_rank.setdefault(r, []) if r is not None else unranked).append(fr)
    next_free = 0
    for fr in sorted(unranked, key=lambda f: f.path):
        while next_free in by_rank:
            next_free += 1
        by_rank[next_free] = [fr]
    return sorted(by_rank.items())


def _assemble(groups: list[tuple[int, list[FileResult]]], max_world: int = DEFAULT.max_world_size
              ) -> tuple[list[RankTrace], list[Skipped]]:
    """One RankTrace per (rank, files); several files of one rank are successive active windows."""
    import pandas as pd

    skipped: list[Skipped] = []
    ranks = []
    for r, frs in groups:
        bases = [M.base_ns(f.meta) or 0 for f in frs]
        base = min(bases)
        # Order windows by their start on the common clock.
        spans = []
        for f, b in zip(frs, bases):
            ts = f.columns["ts"]
            shift = (b - base) / 1000.0
            spans.append((shift + float(ts.min()), shift + float((ts + f.columns["dur"]).max())) if len(ts) else (shift, shift))
        order = list(np.argsort([sp[0] for sp in spans], kind="stable"))
        # Successive windows of one rank never overlap in time; a file that does is another run's (or a copy).
        kept = []
        for i in order:
            clash = next((j for j in kept if spans[i][0] < spans[j][1] and spans[j][0] < spans[i][1]), None)
            if clash is not None:
                skipped.append(Skipped(file=frs[i].path, reason=f"rank {r} again, overlapping {frs[clash].path} in time "
                                                                 "(a copy, or a file from another run)"))
                continue
            kept.append(i)
        order = kept
        frames = []
        for w, i in enumerate(order):
            f = frs[i]
            frames.append(_frame(f.columns, w, (bases[i] - base) / 1000.0))
            f.columns = {}  # free the arrays as soon as the frame holds them
        events = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        if len(frames) > 1:
            for col in ("name", "dtype", "coll", "pg"):
                if not isinstance(events[col].dtype, pd.CategoricalDtype):
                    events[col] = events[col].astype("category")
        first = frs[order[0]]
        frs_used = [frs[i] for i in order]
        name, cc = _device_info(first.meta, events)
        ranks.append(
            RankTrace(
                rank=r,
                world_size=M.world_of(first.meta, max_world),
                files=[f.path for f in frs_used],
                events=events,
                base_ns=base,
                device_name=name,
                compute_capability=cc,
                distributed=M.distributed(first.meta, max_world),
                metadata=M.capture_meta(first.meta),
                windows=len(frs_used),
            )
        )
    return ranks, skipped




def decode_files(paths: list[str], config: Config = DEFAULT, progress: ProgressFn | None = None):
    """Decode many files, in parallel; yields FileResult or TraceFileError per path (in input order)."""
    n = _workers(config)
    limits = Limits.of(config)
    if not paths:
        return []
    if n <= 1:
        return [_decode_file_task(p, None, progress, limits) for p in paths]
    sizes = [os.path.getsize(p) for p in paths]
    out: list = [None] * len(paths)
    with _pool(n) as pool:
        if len(paths) >= n:
            # Enough files to keep every core busy: one file per worker task.
            futs = {pool.submit(_decode_file_task, p, None, None, limits): i for i, p in enumerate(paths)}
            for fut, i in futs.items():
                out[i] = fut.result()
                if progress:
                    progress(paths[i], sizes[i], 0)
        else:
            # Few, possibly big files: cut each into pieces and decode the pieces in parallel.
            for i, p in enumerate(paths):
                out[i] = _decode_file_task(p, pool, progress, limits)
    return out


def plan_folder(files: list, config: Config = DEFAULT) -> tuple[RunPlan, list[Skipped]]:
    """Peek at every file (in parallel when there are several) and decide runs, ranks and windows.

    Returns the plan and the files that could not be read at all (each with its one-line reason).
    """
    paths = [str(f) for f in files]
    n = min(_workers(config), len(paths))
    limits = [Limits.of(config)] * len(paths)
    if n > 1:
        with _pool(n) as pool:
            facts = list(pool.map(peek, paths, limits))
    else:
        facts = list(map(peek, paths, limits))
    bad = [Skipped(file=f.path, reason=f.error) for f in facts if f.error is not None]
    return plan_runs(facts), bad


def select_run(plan: RunPlan, run: int | None, source: str):
    chosen = plan.select(run)
    if chosen is None and plan.runs:
        raise UsageError(f"{source}: --run {run} does not exist (runs 1-{len(plan.runs)}, 1 the oldest)")
    return chosen


def load(
    path: str | os.PathLike | Iterable,
    config: Config = DEFAULT,
    progress: ProgressFn | None = None,
    allow_empty: bool = False,
    run: int | None = None,
    rank: int | None = None,
) -> Trace:
    """Load the trace files under ``path`` into a ``Trace``.

    A folder (or a file) is one run or several: the most recent run is loaded, or run number ``run`` (1 the oldest;
    ``trace.runs`` says what was decided). A list of files is loaded as given: grouped by the rank each names, or
    all as windows of rank ``rank``. Raises ``NoUsableTraceError`` when nothing could be loaded; otherwise unusable
    files are in ``trace.skipped``.
    """
    skipped: list[Skipped] = []
    runs_info = None
    groups_paths: list[tuple[int | None, list[str]]]
    if isinstance(path, (str, os.PathLike)):
        source = str(path)
        files = find_trace_files(path)
        if not files:
            raise NoUsableTraceError(f"{source}: no trace files (*.json, *.json.gz) found")
        plan, bad = plan_folder(files, config)
        skipped.extend(bad)
        skipped.extend(plan.skipped)
        chosen = select_run(plan, run, source)
        if chosen is not None:
            runs_info = runs_dict(plan, chosen)
            groups_paths = [(p.rank, p.files) for p in chosen.processes]
        else:
            groups_paths = []
    else:
        files = [Path(p) for p in path]
        source = ", ".join(str(p) for p in files)
        if not files:
            raise NoUsableTraceError(f"{source}: no trace files (*.json, *.json.gz) found")
        groups_paths = [(rank, [str(f) for f in files])]
    all_paths = [f for _, fs in groups_paths for f in fs]
    decoded, more = _decode_all(all_paths, config, progress)
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
    ranks, more_skipped = _assemble(groups, config.max_world_size)
    skipped.extend(more_skipped)
    worlds = [r.world_size for r in ranks if r.world_size]
    world = max(worlds) if worlds else None
    return Trace(source=source, ranks=ranks, skipped=skipped, world_size=world, runs=runs_info)


def _decode_all(paths: list[str], config: Config, progress: ProgressFn | None
                ) -> tuple[dict[str, FileResult], list[Skipped]]:
    """path -> FileResult of every usable file (from the column cache where it has them), and the others' reasons."""
    results: dict[str, FileResult] = {}
    skipped: list[Skipped] = []
    to_decode = []
    for f in paths:
        hit = _cache.get(Path(f), config) if config.use_cache else None
        if hit is not None:
            results[f] = hit
        else:
            to_decode.append(f)
    for p, res in zip(to_decode, decode_files(to_decode, config, progress)):
        if isinstance(res, TraceFileError):
            skipped.append(Skipped(file=res.path, reason=res.reason))
            continue
        if res.columns["n"] == 0:
            skipped.append(Skipped(file=p, reason="no usable trace events (no complete 'X' events of a known kind)"))
            continue
        if config.use_cache:
            _cache.put(Path(p), res, config)
        results[p] = res
    return results, skipped


def group_by_rank(files: list[Path], config: Config = DEFAULT, run: int | None = None, source: str = ""
                  ) -> tuple[list[tuple[int, list[str]]], list[Skipped], dict | None]:
    """The chosen run of these files as (rank, window files) groups, the files no run holds, and the runs object."""
    plan, bad = plan_folder(files, config)
    chosen = select_run(plan, run, source)
    if chosen is None:
        return [], bad + plan.skipped, None
    return [(p.rank, p.files) for p in chosen.processes], bad + plan.skipped, runs_dict(plan, chosen)
