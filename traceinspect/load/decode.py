"""Bytes of one trace file -> typed columns, fast.

The hot path of the product. A Kineto file is one JSON object whose ``traceEvents`` array holds one event per few
lines. We stream the (possibly gzipped) file, cut the array at event boundaries into pieces of a few tens of MB,
decode each piece with a typed msgspec decoder that only materializes the fields and argument keys the analyses
use, and turn the piece into numpy columns at once, so a decoded event list never outlives its piece. Pieces are
independent, so they can be decoded on several cores. Files in another layout (one line, another indent) are
decoded whole with the same typed decoder.
"""

from __future__ import annotations

import os
import re
from itertools import compress
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from ..errors import TraceFileError
from .compressed import _first_line, iter_bytes  # noqa: F401 - iter_bytes is part of this module's interface
from .layout import (PIECE_BYTES, _EVENTS_KEY, Layout, _detect_layout, _split_whole, decode_meta,  # noqa: F401
                     plan_ranges, read_pieces)  # (the file's layout and pieces: part of this module's interface)
from .trace import CATEGORY_KIND


_INT_MISSING = -1
_NO_RAW = msgspec.Raw(b"")


# The one table of what is read from an event: (attribute, key in the trace or None for the same name, type Kineto
# writes, default). The strict structs decode Kineto's own files; the loose ones take any type where a writer puts
# strings or floats where Kineto puts ints (``columns_from_events(..., loose=True)`` coerces them).
ARG_FIELDS = (
    ("correlation", None, int, _INT_MISSING),
    ("ext", "External id", int, _INT_MISSING),
    ("ext_lc", "external id", int, _INT_MISSING),
    ("stream", None, int, _INT_MISSING),
    ("bytes", None, int, _INT_MISSING),
    ("in_nelems", "In msg nelems", int, _INT_MISSING),
    ("out_nelems", "Out msg nelems", int, _INT_MISSING),
    ("group_size", "Group size", int, _INT_MISSING),
    ("seq", "Seq", int, _INT_MISSING),
    ("dtype", None, str | None, None),
    ("coll", "Collective name", str | None, None),
    ("pg", "Process Group Name", str | None, None),
)
RAW_ARG_FIELDS = (("in_dims", "Input Dims"), ("in_types", "Input type"))  # kept as raw JSON in both
EVENT_FIELDS = (
    ("ph", str, ""), ("cat", str, ""), ("name", str, ""), ("pid", int | str, _INT_MISSING),
    ("tid", int | str, _INT_MISSING), ("ts", float, 0.0), ("dur", float, 0.0),
)


def _args_struct(name: str, loose: bool) -> type:
    fields = [(attr, Any if loose else typ, msgspec.field(name=key or attr, default=default))
              for attr, key, typ, default in ARG_FIELDS]
    fields += [(attr, msgspec.Raw, msgspec.field(name=key, default=_NO_RAW)) for attr, key in RAW_ARG_FIELDS]
    return msgspec.defstruct(name, fields, frozen=True, gc=False)


def _event_struct(name: str, loose: bool, args: type | None) -> type:
    fields = [(attr, Any if loose else typ, default) for attr, typ, default in EVENT_FIELDS]
    if args is not None:
        fields.append(("args", args, args()))
    return msgspec.defstruct(name, fields, gc=False)


Args = _args_struct("Args", loose=False)
LooseArgs = _args_struct("LooseArgs", loose=True)
_EMPTY_ARGS = Args()
_EMPTY_LOOSE = LooseArgs()
Event = _event_struct("Event", loose=False, args=Args)
LooseEvent = _event_struct("LooseEvent", loose=True, args=LooseArgs)
_NoArgsEvent = _event_struct("_NoArgsEvent", loose=True, args=None)


class _MetaEvent(msgspec.Struct):
    """Thread / process name records ("ph": "M"), kept for stream and thread labels."""

    ph: str = ""
    name: str = ""
    pid: int | str = _INT_MISSING
    tid: int | str = _INT_MISSING
    args: dict | None = None


_STRICT = msgspec.json.Decoder(list[Event])
_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
_LOOSE_ONE = msgspec.json.Decoder(LooseEvent)
_NOARGS_ONE = msgspec.json.Decoder(_NoArgsEvent)
_LOOSE = msgspec.json.Decoder(list[LooseEvent])
_CAT = {k: int(v) for k, v in CATEGORY_KIND.items()}

# Columns a piece returns: numeric arrays plus per-piece string tables for the categorical ones.
NUM_COLS = ("kind", "pid", "tid", "ts", "dur", "corr", "ext", "stream", "bytes", "in_nelems", "out_nelems",
            "group_size", "seq")
STR_COLS = ("name", "dtype", "coll", "pg")
RAW_COLS = ("in_dims", "in_types")


_I64 = 1 << 63


def _as_int(v) -> int:
    """Any JSON value -> an int64 value, or -1 (strings of digits are read; NaN, floats out of range are not)."""
    try:
        i = v if type(v) is int else int(v)
    except (TypeError, ValueError, OverflowError):
        return _INT_MISSING
    return i if -_I64 <= i < _I64 else _INT_MISSING


def _as_float(v) -> float:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        try:
            return float(v)
        except OverflowError:
            return 0.0
    return 0.0


def _as_str(v) -> str | None:
    return None if v is None else str(v)


def _kind_of(cat) -> int:
    k = _CAT.get(cat) if isinstance(cat, str) else -1
    if k is None:
        k = _CAT.get(cat.lower(), -1)
        _CAT[cat] = k  # remember this spelling; there are only a handful per trace
    return k


class _CatLookup(dict):
    """cat string -> Kind code (or -1); a dict subclass so the common case is one C-level lookup."""

    def __missing__(self, cat):
        k = _kind_of(cat)
        if isinstance(cat, str):
            self[cat] = k
        return k


_CAT_LOOKUP = _CatLookup(_CAT).__getitem__


def _IS_X(ph) -> bool:  # noqa: N802 - used as a mapped function
    return ph == "X"


def _loose_cat(cat) -> int:
    """Category -> Kind code for any JSON value (a list or object where a string belongs is no category)."""
    return _CAT_LOOKUP(cat) if isinstance(cat, str) else -1


# PyTorch 1.8-1.13 write ProfilerStep#N as an "Operator" (a CPU op); newer ones as a user annotation. Steps are user
# annotations everywhere downstream, so the old spelling is read as the new one.
_STEP_NAME = re.compile(r"^ProfilerStep#\d+$")


def _intern(values: list) -> tuple[np.ndarray, list]:
    """Categorical codes (int32, -1 for None) and the table of distinct strings of one piece (hashing in C)."""
    if not values:
        return np.empty(0, np.int32), []
    codes, uniques = pd.factorize(np.asarray(values, dtype=object), use_na_sentinel=True)
    return codes.astype(np.int32, copy=False), list(uniques)


class _Codes(dict):
    """str -> categorical code; an unseen string gets the next code. Lookups run in C (``map(lut.__getitem__)``),
    Python runs only once per distinct string (a few thousand per trace)."""

    __slots__ = ()

    def __missing__(self, key):
        code = self[key] = len(self) - 1  # None is always in the table (code -1), so codes start at 0
        return code


def _intern_iter(values, n: int) -> tuple[np.ndarray, list]:
    """Like ``_intern`` for an iterator of str or None, without building an object array first."""
    lut = _Codes()
    lut[None] = -1
    codes = np.fromiter(map(lut.__getitem__, values), np.int32, n)
    del lut[None]
    return codes, list(lut)


def _ints(get, items: list, n: int) -> np.ndarray:
    """int64 column of ``get(item)``; non-integers (strings, floats, None) become -1 on the slow path."""
    try:
        return np.fromiter(map(get, items), np.int64, n)
    except (TypeError, ValueError, OverflowError):
        return np.fromiter(map(_as_int, map(get, items)), np.int64, n)


def _floats(get, items: list, n: int) -> np.ndarray:
    try:
        return np.fromiter(map(get, items), np.float64, n)
    except (TypeError, ValueError, OverflowError):
        return np.fromiter(map(_as_float, map(get, items)), np.float64, n)


_G = {name: attrgetter(name) for name in ("ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "correlation", "ext",
                                          "ext_lc", "stream", "bytes", "in_nelems", "out_nelems", "group_size", "seq",
                                          "dtype", "coll", "pg", "in_dims", "in_types")}


def columns_from_events(events: list, loose: bool = False) -> dict:
    """Turn decoded events into columns, keeping only complete events of a category the analyses use.

    Every column is one C-level pass over the events (``np.fromiter(map(attrgetter))``, no intermediate lists) and
    strings are interned through a dict that only calls Python for a new string: building columns costs about as
    much as decoding, not several times more.
    """
    g = _G
    m = len(events)
    kinds_all = np.fromiter(map(_loose_cat if loose else _CAT_LOOKUP, map(g["cat"], events)), np.int16, m)
    is_x = np.fromiter(map(_IS_X if loose else "X".__eq__, map(g["ph"], events)), bool, m)
    keep = is_x & (kinds_all >= 0)
    evs = list(compress(events, keep))
    n = len(evs)
    out: dict = {"n": n, "kind": kinds_all[keep].astype(np.uint8)}
    args = list(map(g["args"], evs))
    out["pid"] = _ints(g["pid"], evs, n)
    out["tid"] = _ints(g["tid"], evs, n)
    out["ts"] = _floats(g["ts"], evs, n)
    out["dur"] = _floats(g["dur"], evs, n)
    out["corr"] = _ints(g["correlation"], args, n)
    ext = _ints(g["ext"], args, n)
    if (ext < 0).any():  # the lower-case spelling only where the usual one is absent
        ext = np.where(ext >= 0, ext, _ints(g["ext_lc"], args, n))
    out["ext"] = ext
    for col in ("stream", "bytes", "in_nelems", "out_nelems", "group_size", "seq"):
        out[col] = _ints(g[col], args, n)
    if loose:
        out["dtype"] = _intern([_as_str(a.dtype) for a in args])
        out["coll"] = _intern([_as_str(a.coll) for a in args])
        out["pg"] = _intern([_as_str(a.pg) for a in args])
        out["name"] = _intern([_as_str(x) or "" for x in map(g["name"], evs)])
    else:
        for col in ("dtype", "coll", "pg"):
            out[col] = _intern_iter(map(g[col], args), n)
        out["name"] = _intern_iter(map(g["name"], evs), n)
    _old_steps_as_annotations(out)
    _drop_impossible_times(out)
    # Shapes and dtypes are kept only for matrix ops (the precision and alignment analyses), as JSON text.
    codes, table = out["name"]
    wanted = np.array([bool(_SHAPE_OPS.search(t)) for t in table] + [False])[codes] & (out["kind"] <= 1)
    rows = np.flatnonzero(wanted)
    for col in RAW_COLS:
        get = g[col]
        vals = [bytes(get(args[i])).decode() or None for i in rows]
        if any(vals):
            full = [None] * n
            for i, v in zip(rows, vals):
                full[i] = v
            out[col] = full
        else:
            out[col] = None
    return out


# Microseconds beyond any clock a trace uses (the Unix epoch reaches 1.8e15 us in 2027): a damaged value.
_MAX_US = 1e17


def _drop_impossible_times(out: dict) -> None:
    """Events whose ts or dur is not a time (NaN, infinite, negative duration, beyond any clock) are dropped."""
    ts, dur = out["ts"], out["dur"]
    ok = np.isfinite(ts) & np.isfinite(dur) & (dur >= 0) & (np.abs(ts) < _MAX_US) & (dur < _MAX_US)
    if ok.all():
        return
    for col in NUM_COLS:
        out[col] = out[col][ok]
    for col in STR_COLS:
        codes, table = out[col]
        out[col] = (codes[ok], table)
    rows = np.flatnonzero(ok)
    for col in RAW_COLS:
        if out[col] is not None:
            out[col] = [out[col][i] for i in rows]
    out["n"] = int(ok.sum())


def _old_steps_as_annotations(out: dict) -> None:
    codes, table = out["name"]
    step_codes = [i for i, t in enumerate(table) if isinstance(t, str) and _STEP_NAME.match(t)]
    if step_codes:
        old = np.isin(codes, step_codes) & (out["kind"] == 0)  # Kind.CPU_OP
        out["kind"][old] = 1  # Kind.USER_ANNOTATION


def decode_piece(piece: bytes) -> dict:
    """Decode a run of comma-separated events (no brackets) into columns."""
    return decode_array(b"[" + piece + b"]")


def decode_array(data: bytes) -> dict:
    """Decode a JSON array of events into columns: typed, else loosely typed, else one event at a time."""
    try:
        return columns_from_events(_STRICT.decode(data))
    except msgspec.ValidationError:
        pass
    try:
        return columns_from_events(_LOOSE.decode(data), loose=True)
    except msgspec.ValidationError:
        pass
    # Some event has a field of a shape no event has (args a number, an event that is a string...): decode each
    # event on its own and keep those that are objects; their args only where args is an object.
    events = []
    for raw in _RAW_LIST.decode(data):
        try:
            events.append(_LOOSE_ONE.decode(raw))
        except msgspec.ValidationError:
            try:
                ev = _NOARGS_ONE.decode(raw)
            except msgspec.ValidationError:
                continue
            events.append(LooseEvent(ph=ev.ph, cat=ev.cat, name=ev.name, pid=ev.pid, tid=ev.tid, ts=ev.ts,
                                     dur=ev.dur))
    return columns_from_events(events, loose=True)


def meta_events(events_json: bytes) -> list[_MetaEvent]:
    return [e for e in msgspec.json.decode(events_json, type=list[_MetaEvent]) if e.ph == "M"]


# CPU ops and annotations whose input shapes / dtypes the analyses read: matrix multiplies, convolutions and
# attention (precision, alignment), and collectives (message sizes where no record_param_comms carries them).
_SHAPE_OPS = re.compile(
    r"mm|matmul|linear|conv|attention|einsum|"
    r"nccl|rccl|gloo|c10d|record_param_comms|all_?reduce|broadcast|all_?gather|reduce_?scatter|all_?to_?all|"
    r"send|recv|barrier",
    re.IGNORECASE,
)


def decode_whole(path: str) -> tuple[dict, dict, int]:
    """The whole document decoded at once, for any valid JSON layout: (columns, meta, decompressed bytes)."""
    data = b"".join(iter_bytes(path))
    text = data.lstrip()
    if not text:
        raise TraceFileError(path, "empty file")
    if text[:1] not in (b"{", b"["):
        raise TraceFileError(path, "not JSON (does not start with '{' or '[')")
    try:
        if text[:1] == b"[":
            return decode_array(text), {}, len(data)
        parts = msgspec.json.decode(text, type=dict[str, msgspec.Raw])
    except msgspec.DecodeError as exc:
        raise TraceFileError(path, f"invalid or truncated JSON ({_first_line(exc)})") from None
    events = parts.pop("traceEvents", None)
    if events is None:
        raise TraceFileError(path, "not a Chrome trace (no 'traceEvents' array)")
    if not bytes(events).lstrip().startswith(b"["):
        raise TraceFileError(path, "not a Chrome trace ('traceEvents' is not an array)")
    meta = {k: msgspec.json.decode(v) for k, v in parts.items()}
    return decode_array(bytes(events)), meta, len(data)


# --------------------------------------------------------------------------------------------------------------
# Plain (uncompressed) files: plan pieces as byte ranges, so worker processes read them from the page cache
# themselves instead of receiving the bytes through a pipe.


def decode_range(path: str, start: int, end: int) -> dict:
    """Decode the events in bytes [start, end) of a plain file (run in a worker process).

    ``pread`` into a private buffer rather than a memory map: mapped file pages would stay resident in the worker
    and count against its memory for the whole file it walks through.
    """
    # The piece is read between the brackets that make it an array, so it is never copied to add them.
    buf = bytearray(end - start + 2)
    buf[0], buf[-1] = 0x5B, 0x5D  # "[", "]"
    fd = os.open(path, os.O_RDONLY)
    try:
        view = memoryview(buf)[1:-1]
        got = 0
        while got < len(view):
            k = os.preadv(fd, [view[got:]], start + got)
            if k == 0:
                raise TraceFileError(path, "file shrank while being read")
            got += k
        view.release()
    finally:
        os.close(fd)
    return decode_array(buf)
