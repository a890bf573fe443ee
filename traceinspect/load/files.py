"""One trace file -> its columns (``FileResult``): cut into pieces at Kineto's event boundaries and decoded in the
pool handed in (or here), or decoded whole when the file is laid out otherwise; many files side by side.

Every failure of a file becomes a ``TraceFileError`` value naming it (``decode_files``): one bad file never stops
the others.
"""

from __future__ import annotations

import os
from concurrent.futures import Executor, Future

from ..errors import TraceFileError
from .limits import DEFAULT_LIMITS, FinalFileError, Limits
from .decode import (decode_meta, decode_piece, decode_range, decode_whole, plan_ranges,
                     read_pieces)
from .prefetch import Taken
from .spill import ColumnSink
from .services import IN_PROCESS, FileResult, ProgressFn, Workers


def decode_file(path: str, *, pool: Executor | None = None, workers: int = 1, progress: ProgressFn | None = None,
                limits: Limits = DEFAULT_LIMITS, taken: Taken | None = None) -> FileResult:
    """Decode one file into columns: cut into pieces at Kineto's event boundaries (decoded in ``pool`` of
    ``workers`` processes when given; ``taken``: its first pieces, started already on their own pool,
    ``load/prefetch.py``), or, when the file is laid out otherwise (any other valid JSON), decoded whole, with the
    same result."""
    try:
        return _decode_cut(path, pool, progress, workers, limits, taken)
    except FinalFileError:  # past a limit (load/limits.py): reading it whole would not get further
        raise
    except (TraceFileError, ValueError, TypeError) as first:
        try:
            cols, meta, nbytes = decode_whole(path, limits=limits)
        except TraceFileError as second:
            raise (first if isinstance(first, TraceFileError) else second) from None
        return FileResult(path=path, meta=meta, columns=cols, nbytes=nbytes)


def _decode_cut(path: str, pool: Executor | None, progress: ProgressFn | None, workers: int,
                limits: Limits, taken: Taken | None = None) -> FileResult:
    if taken is not None:  # its pieces are being decoded already (load/prefetch.py)
        try:
            return _decode_planned(path, taken.plan, taken.pool, progress, taken.futures, limits, taken.count)
        finally:
            taken.done()
    plan = plan_ranges(path, limits=limits)
    if plan is not None:
        return _decode_planned(path, plan, pool, progress, limits=limits, workers=workers)
    pieces_iter, info = read_pieces(path, limits=limits)
    sink = ColumnSink(limits)
    inflight: list[Future] = []
    limit = limits.inflight(workers if pool is not None else 1)
    try:
        for piece in pieces_iter:
            if progress:
                progress(path, len(piece), 0)
            if pool is None:
                sink.add(decode_piece(piece, compact=True))
                continue
            inflight.append(pool.submit(decode_piece, piece, compact=True))
            if len(inflight) >= limit:
                sink.add(inflight.pop(0).result())
        while inflight:
            sink.add(inflight.pop(0).result())
        meta = decode_meta(info["header"], info["trailer"], path)
        columns = sink.finish()
    except TraceFileError:
        raise
    except (ValueError, TypeError) as exc:  # msgspec.DecodeError is a ValueError
        raise TraceFileError(path, f"invalid JSON in traceEvents ({_short(exc)})") from None
    finally:
        for fut in inflight:
            fut.cancel()
        sink.close()
    return FileResult(path=path, meta=meta, columns=columns, nbytes=info["bytes"])


def _decode_planned(path: str, plan: dict, pool: Executor | None, progress: ProgressFn | None,
                    futures: list[Future] | None = None, limits: Limits = DEFAULT_LIMITS, workers: int = 1
                    ) -> FileResult:
    """A plain file cut into byte ranges that the workers (or this process, without a pool) read themselves;
    ``futures``: the first ranges, submitted already. At most ``limits.inflight`` ranges are decoding or decoded
    and not yet collected at once, and the collected columns go to a ``ColumnSink`` (load/spill.py)."""
    ranges = plan["ranges"]
    futures = list(futures or [])
    limit = limits.inflight(workers if pool is not None else 1)
    sink = ColumnSink(limits)
    try:
        for i, (a, b) in enumerate(ranges):
            if pool is not None:
                while len(futures) < min(len(ranges), i + limit):
                    futures.append(pool.submit(decode_range, path, *ranges[len(futures)]))
                sink.add(futures[i].result())
                futures[i] = None
            else:
                sink.add(decode_range(path, a, b))
            if progress:
                progress(path, b - a, 0)
        columns = sink.finish()
    except (ValueError, TypeError) as exc:
        raise TraceFileError(path, f"invalid JSON in traceEvents ({_short(exc)})") from None
    finally:
        for f in futures:
            if f is not None:
                f.cancel()
        sink.close()
    meta = decode_meta(plan["header"], plan["trailer"], path)
    return FileResult(path=path, meta=meta, columns=columns, nbytes=plan["bytes"])


def _short(exc: Exception) -> str:
    return str(exc).splitlines()[0][:120]


def _decode_file_task(path: str, **how) -> FileResult | TraceFileError:
    """``decode_file(path, **how)``; every failure becomes a TraceFileError value naming the file (never a crash)."""
    try:
        return decode_file(path, **how)
    except TraceFileError as exc:
        return exc
    except MemoryError:
        return TraceFileError(path, "out of memory while decoding")
    except OSError as exc:
        return TraceFileError(path, f"cannot read ({exc.strerror or exc})")
    except Exception as exc:  # noqa: BLE001 - one odd file must not stop the others
        return TraceFileError(path, f"could not be decoded ({type(exc).__name__}: {_short(exc)})")


def decode_files(paths: list[str], workers: Workers = IN_PROCESS, progress: ProgressFn | None = None,
                 limits: Limits = DEFAULT_LIMITS) -> list:
    """Decode many files, in parallel on ``workers``; a FileResult or TraceFileError per path (in input order). A
    file whose pieces ``workers.started`` holds (``load/prefetch.py``) is collected from there."""
    n = workers.count
    if not paths:
        return []
    if n <= 1:
        return [_decode_file_task(p, progress=progress, limits=limits) for p in paths]
    sizes = [os.path.getsize(p) for p in paths]
    out: list = [None] * len(paths)
    with workers.pool(n) as pool:
        if len(paths) >= n:
            # Enough files to keep every core busy: one file per worker task.
            futs = {pool.submit(_decode_file_task, p, limits=limits): i for i, p in enumerate(paths)}
            for fut, i in futs.items():
                out[i] = fut.result()
                if progress:
                    progress(paths[i], sizes[i], 0)
        else:
            # Few, possibly big files: cut each into pieces and decode the pieces in parallel.
            started = getattr(workers, "started", None)
            for i, p in enumerate(paths):
                taken = started.take(p) if started is not None else None
                out[i] = _decode_file_task(p, pool=pool, workers=n, progress=progress, limits=limits, taken=taken)
    return out
