"""Files -> ``Trace``: find every rank's trace files, decode them into columns (in parallel), group by rank.

Bad files degrade one at a time: each becomes a ``Skipped`` entry with a one-line reason and the rest loads.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import pandas as pd

from ..run import cache as _cache
from ..run.pool import process_pool as _pool, worker_count as _workers  # pools are made in one place
from ..config import Config, DEFAULT
from .discover import find_trace_files
from .decode import NUM_COLS, RAW_COLS, STR_COLS, decode_meta, decode_piece, decode_range, plan_ranges, read_pieces
from ..errors import NoUsableTraceError, TraceFileError
from .trace import RankTrace, Skipped, Trace

_RANK_IN_NAME = re.compile(r"(?:rank|worker|rk)[-_]?(\d+)", re.IGNORECASE)

ProgressFn = Callable[[str, int, int], None]  # (file, bytes done in this call, total bytes of all files)


@dataclass
class FileResult:
    path: str
    meta: dict
    columns: dict  # column name -> np.ndarray / list
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
    for col in RAW_COLS:
        if any(p[col] is not None for p in pieces):
            vals: list = []
            for p in pieces:
                vals.extend(p[col] if p[col] is not None else [None] * p["n"])
            out[col] = vals
        else:
            out[col] = None
    out["n"] = n
    return out


def decode_file(path: str, pool: ProcessPoolExecutor | None = None, progress: ProgressFn | None = None) -> FileResult:
    """Decode one file into columns; pieces go to ``pool`` when given (bounded in flight to keep memory flat)."""
    if pool is not None:
        plan = plan_ranges(path)
        if plan is not None:
            return _decode_planned(path, plan, pool, progress)
    pieces_iter, info = read_pieces(path)
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


def _decode_planned(path: str, plan: dict, pool: ProcessPoolExecutor, progress: ProgressFn | None) -> FileResult:
    """A plain file cut into byte ranges that the workers read themselves."""
    futures = [pool.submit(decode_range, path, a, b) for a, b in plan["ranges"]]
    results = []
    try:
        for (a, b), fut in zip(plan["ranges"], futures):
            results.append(fut.result())
            if progress:
                progress(path, b - a, 0)
    except (ValueError, TypeError) as exc:
        raise TraceFileError(path, f"invalid JSON in traceEvents ({_short(exc)})") from None
    meta = decode_meta(plan["header"], plan["trailer"], path)
    return FileResult(path=path, meta=meta, columns=_concat_pieces(results), nbytes=plan["bytes"])


def _short(exc: Exception) -> str:
    return str(exc).splitlines()[0][:120]


def _decode_file_task(path: str, pool: ProcessPoolExecutor | None = None,
                      progress: ProgressFn | None = None) -> FileResult | TraceFileError:
    """Decode one file; every failure becomes a TraceFileError value naming the file (never a crash)."""
    try:
        return decode_file(path, pool, progress)
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
        arr = np.empty(n, dtype=object)  # all None
        if raw is not None:
            arr[:] = raw
        data[col] = pd.Series(arr, dtype=object, copy=False)  # object, not str: None stays None
    data["window"] = np.full(n, window, np.int16)
    return pd.DataFrame(data, copy=False)


def _rank_of(meta: dict, path: str) -> int | None:
    dist = meta.get("distributedInfo") or {}
    r = dist.get("rank") if isinstance(dist, dict) else None
    if isinstance(r, int):
        return r
    ti = meta.get("traceinspect") or {}
    if isinstance(ti, dict) and isinstance(ti.get("rank"), int):
        return ti["rank"]
    m = _RANK_IN_NAME.search(Path(path).name)
    return int(m.group(1)) if m else None


def _device_info(meta: dict, events: pd.DataFrame) -> tuple[str | None, tuple[int, int] | None]:
    props = meta.get("deviceProperties") or []
    if not props:
        return None, None
    gpu_pids = events.loc[events["kind"] >= 5, "pid"]
    dev_id = int(gpu_pids.mode().iloc[0]) if len(gpu_pids) else None
    chosen = None
    for p in props:
        if isinstance(p, dict) and (dev_id is None or p.get("id") == dev_id):
            chosen = p
            break
    if chosen is None:
        chosen = props[0] if isinstance(props[0], dict) else None
    if not chosen:
        return None, None
    cc = (chosen.get("computeMajor"), chosen.get("computeMinor"))
    return chosen.get("name"), (int(cc[0]), int(cc[1] or 0)) if cc[0] is not None else None


def _assemble(results: list[FileResult]) -> tuple[list[RankTrace], list[Skipped]]:
    """Group files by rank; several files of one rank are successive active windows."""
    by_rank: dict[int, list[FileResult]] = {}
    unranked: list[FileResult] = []
    skipped: list[Skipped] = []
    for fr in results:
        r = _rank_of(fr.meta, fr.path)
        (by_rank.setdefault(r, []) if r is not None else unranked).append(fr)
    # Files with no rank anywhere get the next free ranks, in path order.
    next_free = 0
    for fr in sorted(unranked, key=lambda f: f.path):
        while next_free in by_rank:
            next_free += 1
        by_rank[next_free] = [fr]
    ranks = []
    for r, frs in sorted(by_rank.items()):
        bases = [int(f.meta.get("baseTimeNanoseconds") or 0) for f in frs]
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
        dist = first.meta.get("distributedInfo") or {}
        world = dist.get("world_size") if isinstance(dist, dict) else None
        if world is None and isinstance(first.meta.get("traceinspect"), dict):
            world = first.meta["traceinspect"].get("world_size")
        name, cc = _device_info(first.meta, events)
        ranks.append(
            RankTrace(
                rank=r,
                world_size=world,
                files=[f.path for f in frs_used],
                events=events,
                base_ns=base,
                device_name=name,
                compute_capability=cc,
                distributed=dist if isinstance(dist, dict) else {},
                metadata=first.meta.get("traceinspect") if isinstance(first.meta.get("traceinspect"), dict) else {},
                windows=len(frs_used),
            )
        )
    return ranks, skipped




def decode_files(paths: list[str], config: Config = DEFAULT, progress: ProgressFn | None = None):
    """Decode many files, in parallel; yields FileResult or TraceFileError per path (in input order)."""
    n = _workers(config)
    if not paths:
        return []
    if n <= 1:
        return [_decode_file_task(p, None, progress) for p in paths]
    sizes = [os.path.getsize(p) for p in paths]
    out: list = [None] * len(paths)
    with _pool(n) as pool:
        if len(paths) >= n:
            # Enough files to keep every core busy: one file per worker task.
            futs = {pool.submit(_decode_file_task, p): i for i, p in enumerate(paths)}
            for fut, i in futs.items():
                out[i] = fut.result()
                if progress:
                    progress(paths[i], sizes[i], 0)
        else:
            # Few, possibly big files: cut each into pieces and decode the pieces in parallel.
            for i, p in enumerate(paths):
                out[i] = _decode_file_task(p, pool, progress)
    return out


def load(
    path: str | os.PathLike | Iterable,
    config: Config = DEFAULT,
    progress: ProgressFn | None = None,
    allow_empty: bool = False,
) -> Trace:
    """Load every trace file under ``path`` (a folder or a file) into a ``Trace``.

    Raises ``NoUsableTraceError`` when nothing could be loaded; otherwise unusable files are in ``trace.skipped``.
    """
    if isinstance(path, (str, os.PathLike)):
        files = find_trace_files(path)
        source = str(path)
    else:
        files = [Path(p) for p in path]
        source = ", ".join(str(p) for p in files)
    if not files:
        raise NoUsableTraceError(f"{source}: no trace files (*.json, *.json.gz) found")
    results: list[FileResult] = []
    skipped: list[Skipped] = []
    to_decode = []
    for f in files:
        hit = _cache.get(f, config) if config.use_cache else None
        if hit is not None:
            results.append(hit)
        else:
            to_decode.append(str(f))
    for p, res in zip(to_decode, decode_files(to_decode, config, progress)):
        if isinstance(res, TraceFileError):
            skipped.append(Skipped(file=res.path, reason=res.reason))
            continue
        if res.columns["n"] == 0:
            skipped.append(Skipped(file=p, reason="no usable trace events (no complete 'X' events of a known kind)"))
            continue
        if config.use_cache:
            _cache.put(Path(p), res, config)
        results.append(res)
    if not results:
        if allow_empty:
            return Trace(source=source, ranks=[], skipped=skipped)
        reasons = "; ".join(f"{Path(s.file).name}: {s.reason}" for s in skipped[:3])
        raise NoUsableTraceError(f"{source}: no usable trace ({reasons})")
    results.sort(key=lambda r: r.path)
    ranks, more_skipped = _assemble(results)
    skipped.extend(more_skipped)
    worlds = [r.world_size for r in ranks if r.world_size]
    world = max(worlds) if worlds else None
    return Trace(source=source, ranks=ranks, skipped=skipped, world_size=world)


def peek_rank(path: str | os.PathLike) -> int | None:
    """The rank a file belongs to, from the metadata written before its events (cheap: reads the head only)."""
    from .decode import iter_bytes, _EVENTS_KEY

    head = b""
    try:
        for block in iter_bytes(str(path)):
            head += block
            m = _EVENTS_KEY.search(head)
            if m or len(head) > (8 << 20):
                break
        m = _EVENTS_KEY.search(head)
        meta = decode_meta(head[: m.end() - 1], b"}", str(path)) if m else {}
    except (TraceFileError, OSError):
        meta = {}
    return _rank_of(meta, str(path))


def group_by_rank(files: list[Path]) -> tuple[dict[int, list[str]], list[str]]:
    """Files per rank (several files of a rank are its successive windows), plus files of unknown rank."""
    by_rank: dict[int, list[str]] = {}
    unknown: list[str] = []
    for f in files:
        r = peek_rank(f)
        (by_rank.setdefault(r, []) if r is not None else unknown).append(str(f))
    return by_rank, unknown
