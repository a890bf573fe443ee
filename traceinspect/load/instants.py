"""Instant events the analyses read, as their own per-rank table: the allocator's ``[memory]`` records and
``[OutOfMemory]`` (a failed allocation), written by ``torch.profiler`` with ``profile_memory=True``.

One row per event:

=============== ======= =======================================================================================
column          dtype   meaning
=============== ======= =======================================================================================
ts              float64 when, in microseconds on the rank's clock (the window's shift applied, as for events)
tid             int64   the thread that allocated or freed (the CPU op running there made the request)
bytes           int64   ``args.Bytes``: signed, + an allocation, - a free (``[OutOfMemory]``: the request)
allocated       int64   ``args["Total Allocated"]``: bytes the caching allocator hands out after the event
reserved        int64   ``args["Total Reserved"]``: bytes it holds from the device after the event
addr            int64   ``args.Addr``: pairs an allocation with its free (-1 when absent)
device_type     int8    ``args["Device Type"]``: 0 CPU, 1 CUDA, 6 HIP (ROCm), ... (-1 when absent)
device_id       int16   ``args["Device Id"]`` (-1 for the CPU)
oom             bool    an ``[OutOfMemory]`` event (the allocation it records failed)
=============== ======= =======================================================================================

Only these two names are kept; any other instant event (``Iteration Start``, ``Record Window End``) is not.
Integers beyond int64, or not integers, read as -1: a size is data, never trusted as an allocation size.
A trace without memory events makes no table (``None``) and costs nothing: the tagged decoder finds these events
among the distinct (category, name, process, thread) keys it interns anyway.
"""

from __future__ import annotations

from itertools import compress
from operator import attrgetter

import msgspec
import numpy as np

MEMORY_NAMES = ("[memory]", "[OutOfMemory]")
INSTANT_COLS = ("ts", "tid", "bytes", "allocated", "reserved", "addr", "device_type", "device_id", "oom")
_DTYPES = {"ts": np.float64, "tid": np.int64, "bytes": np.int64, "allocated": np.int64, "reserved": np.int64,
           "addr": np.int64, "device_type": np.int8, "device_id": np.int16, "oom": np.bool_}
_MISSING = -1
_I64 = 1 << 63

# (attribute, key in args): what a memory event says.
MEMORY_ARG_FIELDS = (("bytes", "Bytes"), ("allocated", "Total Allocated"), ("reserved", "Total Reserved"),
                     ("addr", "Addr"), ("device_type", "Device Type"), ("device_id", "Device Id"))


def memory_args_struct(name: str, loose: bool) -> type:
    """The args of a memory event: every field an int (``loose``: any JSON value, coerced on the way to columns)."""
    typ = object if loose else int
    return msgspec.defstruct(name, [(attr, typ, msgspec.field(name=key, default=_MISSING))
                                    for attr, key in MEMORY_ARG_FIELDS], frozen=True, gc=False)


MemoryArgs = memory_args_struct("MemoryArgs", loose=False)
_LooseMemoryArgs = memory_args_struct("LooseMemoryArgs", loose=True)


class _LooseInstant(msgspec.Struct, gc=False):
    """Any event, read only far enough to tell a memory instant (the slow paths' second look at a piece)."""

    ph: object = None
    name: object = None
    tid: object = _MISSING
    ts: object = None
    args: object = None


_LOOSE_LIST = msgspec.json.Decoder(list[_LooseInstant])
_ARGS = attrgetter(*(attr for attr, _ in MEMORY_ARG_FIELDS))


def _int(v) -> int:
    if type(v) is int:
        return v if -_I64 <= v < _I64 else _MISSING
    if isinstance(v, float) and v == v and abs(v) < 2.0 ** 63 and v == int(v):
        return int(v)
    return _MISSING


def _ints(values: list) -> np.ndarray:
    """``_int`` of each value: numpy's own conversion where every value is a Python int that fits (the common
    case, in C), else value by value."""
    try:
        arr = np.array(values)
    except (OverflowError, ValueError, TypeError):
        arr = None
    if arr is not None and arr.dtype == np.int64 and bool not in set(map(type, values)):
        return arr
    return np.fromiter((_int(v) for v in values), np.int64, len(values))


def _table(rows: list[tuple]) -> dict | None:
    """(ts, tid, oom, args tuple) rows -> columns (``_columns``), each value coerced on its own."""
    if not rows:
        return None
    ts = np.array([r[0] if isinstance(r[0], (int, float)) and not isinstance(r[0], bool) else np.nan
                   for r in rows], np.float64)
    return _columns(ts, _ints([r[1] for r in rows]), np.fromiter((r[2] for r in rows), np.bool_, len(rows)),
                    [_ints([r[3][j] for r in rows]) for j in range(len(MEMORY_ARG_FIELDS))])


def _columns(ts: np.ndarray, tid: np.ndarray, oom: np.ndarray, args: list[np.ndarray]) -> dict | None:
    """The table's columns; rows with a time that is not a finite number are dropped, a device type or id beyond
    its column's type reads as -1."""
    ok = np.isfinite(ts) & (np.abs(ts) < 1e17)
    if not ok.all():
        if not ok.any():
            return None
        ts, tid, oom, args = ts[ok], tid[ok], oom[ok], [a[ok] for a in args]
    out = {"ts": ts, "tid": tid, "oom": oom}
    for (attr, _), col in zip(MEMORY_ARG_FIELDS, args):
        if attr == "device_type":
            col = np.where((col >= -128) & (col < 128), col, -1).astype(np.int8)
        elif attr == "device_id":
            col = np.where((col >= -32768) & (col < 32768), col, -1).astype(np.int16)
        out[attr] = col
    return out


_TS, _TID, _NAME, _ARGS_OF = (attrgetter(a) for a in ("ts", "tid", "name", "args"))
_ARG_GETTERS = [attrgetter(attr) for attr, _ in MEMORY_ARG_FIELDS]


def _typed_table(events: list) -> dict | None:
    """``_table`` of instants the tagged decoder typed (a float time, int arguments, int threads), a column at a
    time in C; None where an int is past int64 (``_table`` then reads it as -1)."""
    n = len(events)
    try:
        tid = np.fromiter(map(_TID, events), np.int64, n)
        args = list(map(_ARGS_OF, events))
        cols = [np.fromiter(map(get, args), np.int64, n) for get in _ARG_GETTERS]
    except (TypeError, ValueError, OverflowError):
        return None
    ts = np.fromiter(map(_TS, events), np.float64, n)
    oom = np.fromiter(map("[OutOfMemory]".__eq__, map(_NAME, events)), np.bool_, n)
    return _columns(ts, tid, oom, cols)


def from_tagged(events: list, keys: list, icodes: np.ndarray) -> dict | None:
    """The memory instants among events decoded by the tagged decoder. ``keys``: the distinct (cat, name, pid,
    tid) tuples, ``icodes`` each event's index into them: only the events of keys named like a memory event are
    looked at (none, in a trace recorded without ``profile_memory``)."""
    wanted = [i for i, k in enumerate(keys) if k[0] is None and k[1] in MEMORY_NAMES]
    if not wanted:
        return None
    found = list(compress(events, np.isin(icodes, wanted)))
    if all(type(keys[i][3]) is int for i in wanted):  # no thread named by a string (which reads as -1)
        fast = _typed_table(found)
        if fast is not None:
            return fast
    return _table([(e.ts, e.tid, e.name == "[OutOfMemory]", _ARGS(e.args)) for e in found])


def from_bytes(data) -> dict | None:
    """The memory instants of a JSON array of events, for the decoders' slower paths: a second, loose look at the
    piece, taken only when its text names a memory event."""
    view = bytes(data) if not isinstance(data, bytes) else data
    if b"[memory]" not in view and b"[OutOfMemory]" not in view:
        return None
    try:
        events = _LOOSE_LIST.decode(view)
    except (msgspec.DecodeError, RecursionError):
        return None
    return from_python([{"ph": e.ph, "name": e.name, "tid": e.tid, "ts": e.ts, "args": e.args} for e in events])


def from_python(events: list) -> dict | None:
    """The memory instants of events read as Python objects (dicts)."""
    rows = []
    for e in events:
        if not isinstance(e, dict) or e.get("ph") not in ("i", "I") or e.get("name") not in MEMORY_NAMES:
            continue
        args = e.get("args")
        args = args if isinstance(args, dict) else {}
        rows.append((e.get("ts"), e.get("tid"), e.get("name") == "[OutOfMemory]",
                     tuple(args.get(key, _MISSING) for _, key in MEMORY_ARG_FIELDS)))
    return _table(rows)


def concat(parts) -> dict | None:
    """One table of several pieces' (None where a piece has none), in their order."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    return {c: np.concatenate([p[c] for p in parts]) for c in INSTANT_COLS}


def frame(parts: list[tuple[dict | None, float]]):
    """The rank's instants table (a DataFrame in time order) of its windows' tables, each with the shift of its
    window onto the rank's clock; None when no window has any."""
    import pandas as pd

    shifted = []
    for cols, shift in parts:
        if cols is None or not len(cols["ts"]):
            continue
        cols = dict(cols)
        if shift:
            cols["ts"] = cols["ts"] + shift
        shifted.append(cols)
    joined = concat(shifted)
    if joined is None:
        return None
    df = pd.DataFrame({c: np.asarray(joined[c], dtype=_DTYPES[c]) for c in INSTANT_COLS}, copy=False)
    return df.sort_values("ts", kind="stable", ignore_index=True)
