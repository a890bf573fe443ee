"""The launch shape (grid and block) of every kernel of a rank's trace files, for the diff's kernels by name and
shape (``report/diff_shapes.py``). Kineto records ``args.grid`` and ``args.block`` on CUDA kernel events; the events
table of ``load/`` does not keep them, so they are read here once more from the files, only the few fields needed.
A rank whose files' text would exceed ``SHAPE_READ_CAP`` is not read again (the kernels are then compared by name only)."""

from __future__ import annotations

from typing import Any

import msgspec

SHAPE_READ_CAP = 512 << 20  # bytes of decompressed trace text read again for the shapes, per rank
NOT_RECORDED = "shape not recorded"


class _Args(msgspec.Struct, frozen=True, gc=False):
    grid: Any = None
    block: Any = None


class _Event(msgspec.Struct, gc=False):
    ph: Any = ""
    cat: Any = ""
    name: Any = ""
    dur: Any = 0.0
    args: _Args = _Args()


class _Doc(msgspec.Struct, gc=False):
    traceEvents: list[_Event] = []


_DECODER = msgspec.json.Decoder(_Doc)


def _dims(v) -> str | None:
    """``[x, y, z]`` of small non-negative ints as ``XxYxZ``; anything else None (data, never trusted)."""
    if not isinstance(v, list) or not 1 <= len(v) <= 3:
        return None
    if not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 1 << 32 for x in v):
        return None
    return "x".join(str(x) for x in v)


def shape_of(args: _Args) -> str:
    grid, block = _dims(args.grid), _dims(args.block)
    return f"grid {grid}, block {block}" if grid and block else NOT_RECORDED


def kernel_shapes(files: list[str]) -> dict[str, dict[str, list[float]]] | None:
    """Kernel name -> shape -> [count, total us] over ``files`` (one rank's); None when a file cannot be read or
    decoded, or the files' text together exceeds the cap."""
    from ..load.compressed import iter_bytes

    out: dict[str, dict[str, list[float]]] = {}
    size = 0
    try:
        for path in files:
            blocks = []
            for b in iter_bytes(str(path)):
                size += len(b)
                if size > SHAPE_READ_CAP:
                    return None
                blocks.append(b)
            doc = _DECODER.decode(b"".join(blocks))
            for e in doc.traceEvents:
                if e.ph != "X" or not isinstance(e.name, str) or not isinstance(e.cat, str):
                    continue
                if e.cat.lower() != "kernel":
                    continue
                dur = float(e.dur) if isinstance(e.dur, (int, float)) and not isinstance(e.dur, bool) else 0.0
                slot = out.setdefault(e.name, {}).setdefault(shape_of(e.args), [0.0, 0.0])
                slot[0] += 1
                slot[1] += dur
    except Exception:  # noqa: BLE001 - the shapes are an extra; the kernels are then compared by name only
        return None
    return out


def report_shapes(folder_report) -> dict[int, dict] | None:
    """Rank id -> its kernels' shapes (``kernel_shapes``), for every rank of a folder report."""
    try:
        return {ra.rank: kernel_shapes(list(ra.files)) for ra in folder_report.analysis.ranks}
    except Exception:  # noqa: BLE001
        return None
