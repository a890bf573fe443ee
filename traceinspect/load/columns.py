"""Decoded events -> numpy columns, in as few passes over the events as possible.

Each pass over half a million decoded events costs tens of milliseconds whatever it does, so the work is counted
in passes. Values that repeat are read together and interned as one tuple: ``(cat, name, pid, tid)`` gives the
kind, the name, the process and the thread of an event in one dict lookup, and the rarely present argument keys
(``stream``, ``bytes``, the collective's sizes and names) come as one tuple whose few distinct values are turned
into columns once. The loosely typed path (``columns_from_events(..., loose=True)``) reads one column per pass
and coerces each value; both give the same columns for the same events.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache
from itertools import compress
from operator import attrgetter, itemgetter

import numpy as np

from . import instants as _instants
from .trace import CATEGORY_KIND
from .unmodelled import IMPOSSIBLE, unmodelled

_INT_MISSING = -1
_I64 = 1 << 63

# Columns a piece returns: numeric arrays plus per-piece string tables for the categorical ones.
NUM_COLS = ("kind", "pid", "tid", "ts", "dur", "corr", "ext", "stream", "bytes", "in_nelems", "out_nelems",
            "group_size", "seq")
STR_COLS = ("name", "dtype", "coll", "pg")
RAW_COLS = ("in_dims", "in_types", "in_concrete")
_CAT = {k: int(v) for k, v in CATEGORY_KIND.items()}


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
    return _CAT.get(cat.lower(), -1) if k is None else k  # another spelling (``_CatLookup`` remembers it)


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

# CPU ops and annotations whose input shapes / dtypes the analyses read: matrix multiplies, convolutions and
# attention (precision, alignment, FLOPs), embeddings (the batch and its tokens), and collectives (message sizes where
# no record_param_comms carries them).
_SHAPE_OPS = re.compile(
    r"mm|matmul|linear|conv|attention|einsum|embedding|"
    r"nccl|rccl|gloo|c10d|record_param_comms|all_?reduce|broadcast|all_?gather|reduce_?scatter|all_?to_?all|"
    r"send|recv|barrier",
    re.IGNORECASE,
)


@lru_cache(maxsize=1 << 16)
def _wants_shapes(name) -> bool:
    """Whether an op of this name keeps its shapes (remembered: every piece of a trace holds the same names)."""
    return isinstance(name, str) and bool(_SHAPE_OPS.search(name))


def _intern(values: list) -> tuple[np.ndarray, list]:
    """Categorical codes (int32, -1 for None) and the table of distinct strings, in order of first appearance."""
    return _intern_iter(iter(values), len(values))


class _Codes(dict):
    """str -> categorical code; an unseen string gets the next code. Lookups run in C (``map(lut.__getitem__)``),
    Python runs only once per distinct string (a few thousand per trace)."""

    __slots__ = ()

    def __missing__(self, key):
        code = self[key] = len(self) - 1  # None is always in the table (code -1), so codes start at 0
        return code


class _Table(dict):
    """value -> code in order of first appearance, from 0 (the joint tables of repeated tuples)."""

    __slots__ = ()

    def __missing__(self, key):
        code = self[key] = len(self)
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
                                          "dtype", "coll", "pg", "in_dims", "in_types",
                                          "in_concrete")}
_IDENT = attrgetter("cat", "name", "pid", "tid")
_RARE_INTS = ("stream", "bytes", "in_nelems", "out_nelems", "group_size", "seq")
_RARE_STRS = ("dtype", "coll", "pg")
_RARE = attrgetter(*_RARE_INTS, *_RARE_STRS)
_ONE = itemgetter(0)


def columns_from_tagged(events: list, compact: bool = False) -> dict:
    """Columns of events decoded by the strict tagged decoder: complete events are structs with every field, every
    other phase a field-less struct whose ``cat``, ``name``, ``pid`` and ``tid`` are class attributes (None).
    ``compact``: the columns made from a few distinct values are handed over as codes into those values
    (``LOOKUPS``; ``expanded`` makes them columns), for a piece that crosses a pipe to the process joining it.

    The same columns as ``columns_from_events`` gives for the same events (tests/load/test_columns.py)."""
    m = len(events)
    ident = _Table()
    icodes = np.fromiter(map(ident.__getitem__, map(_IDENT, events)), np.int32, m)
    keys = list(ident)
    kind_of = np.fromiter(map(_CAT_LOOKUP, map(_ONE, keys)), np.int16, len(keys)) if keys else np.empty(0, np.int16)
    found = _instants.from_tagged(events, keys, icodes)
    keep = (kind_of >= 0)[icodes]
    evs = list(compress(events, keep))
    n = len(evs)
    per_key = np.bincount(icodes, minlength=len(keys))
    icodes = icodes[keep]
    out: dict = {"n": n, "kind": kind_of[icodes].astype(np.uint8), "instants": found}
    out["unmodelled"] = unmodelled(((k[0], c) for k, c, kk in zip(keys, per_key, kind_of) if kk < 0 and c),
                                   _CAT_LOOKUP)
    lookups = [(icodes, {col: _ints(itemgetter(j), keys, len(keys)) for j, col in enumerate(LOOKUP_GROUPS[0], 2)})]
    # Names numbered in order of first appearance among the kept events, as one pass over the names would.
    names = _Codes()
    names[None] = -1
    name_of = np.array([names[k[1]] if kind_of[i] >= 0 else -1 for i, k in enumerate(keys)] + [-1], np.int32)
    del names[None]
    out["name"] = (name_of[icodes], list(names))
    args = list(map(_G["args"], evs))
    out["ts"] = _floats(_G["ts"], evs, n)
    out["dur"] = _floats(_G["dur"], evs, n)
    out["corr"] = _ints(_G["correlation"], args, n)
    out["ext"] = _with_lower_case_ext(_ints(_G["ext"], args, n), args)
    rare = _Table()
    rcodes = np.fromiter(map(rare.__getitem__, map(_RARE, args)), np.int32, n)
    table = list(rare)
    lookups.append((rcodes, {col: _ints(itemgetter(j), table, len(table)) for j, col in enumerate(LOOKUP_GROUPS[1])}))
    for j, col in enumerate(_RARE_STRS, start=len(_RARE_INTS)):
        codes, strings = _intern_iter(map(itemgetter(j), table), len(table))
        out[col] = (codes[rcodes], strings)
    out[LOOKUPS] = lookups
    out = _finish(out, args)
    return out if compact else expanded(out)


# A piece's integer columns that are codes into a few distinct values: a list of (codes, {column: values}), one
# per group of ``LOOKUP_GROUPS``, each column ``values[codes]`` (``expanded``). The process and thread of an event
# come from its (category, name, process, thread) key, the rarely present arguments from their tuple: 8 columns of
# 8 bytes an event become 2 of 4.
LOOKUPS = "lookups"
LOOKUP_GROUPS = (("pid", "tid"), _RARE_INTS)


def expanded(cols: dict) -> dict:
    """``cols`` with every column handed over as codes (``LOOKUPS``) made whole: ``values[codes]``."""
    for codes, values in cols.pop(LOOKUPS, ()):
        for col, vals in values.items():
            cols[col] = vals[codes]
    return cols


def compacted(cols: dict) -> dict:
    """``cols`` (whole, as the slower decoders give them) with the ``LOOKUP_GROUPS`` columns as codes into their
    distinct values, as the fast decoder hands them over: the inverse of ``expanded``."""
    lookups = []
    for group in LOOKUP_GROUPS:
        rows = np.stack([np.asarray(cols.pop(c), np.int64) for c in group], axis=1)
        values, codes = np.unique(rows, axis=0, return_inverse=True)
        lookups.append((codes.reshape(-1).astype(np.int32), {c: values[:, j].copy() for j, c in enumerate(group)}))
    cols[LOOKUPS] = lookups
    return cols


def _with_lower_case_ext(ext: np.ndarray, args: list) -> np.ndarray:
    """The lower-case spelling of the external id, read only where the usual one is absent."""
    missing = ext < 0
    if missing.any():
        ext[missing] = _ints(_G["ext_lc"], list(compress(args, missing)), int(missing.sum()))
    return ext


def columns_from_events(events: list, loose: bool = False) -> dict:
    """Turn decoded events into columns, keeping only complete events of a category the analyses use.

    One C-level pass per column (``np.fromiter(map(attrgetter))``, no intermediate lists); strings are interned
    through a dict that only calls Python for a new string. ``loose``: any JSON value may stand where Kineto
    writes an int, a float or a string, and is coerced (see ``_as_int``).
    """
    g = _G
    m = len(events)
    kinds_all = np.fromiter(map(_loose_cat if loose else _CAT_LOOKUP, map(g["cat"], events)), np.int16, m)
    is_x = np.fromiter(map(_IS_X if loose else "X".__eq__, map(g["ph"], events)), bool, m)
    keep = is_x & (kinds_all >= 0)
    evs = list(compress(events, keep))
    n = len(evs)
    out: dict = {"n": n, "kind": kinds_all[keep].astype(np.uint8)}
    out["unmodelled"] = unmodelled(Counter(c for c in map(g["cat"], compress(events, is_x & (kinds_all < 0)))
                                           if isinstance(c, str)).items(),
                                   _loose_cat)
    args = list(map(g["args"], evs))
    out["pid"] = _ints(g["pid"], evs, n)
    out["tid"] = _ints(g["tid"], evs, n)
    out["ts"] = _floats(g["ts"], evs, n)
    out["dur"] = _floats(g["dur"], evs, n)
    out["corr"] = _ints(g["correlation"], args, n)
    out["ext"] = _with_lower_case_ext(_ints(g["ext"], args, n), args)
    for col in _RARE_INTS:
        out[col] = _ints(g[col], args, n)
    if loose:
        for col in _RARE_STRS:
            out[col] = _intern([_as_str(v) for v in map(g[col], args)])
        out["name"] = _intern([_as_str(x) or "" for x in map(g["name"], evs)])
    else:
        for col in _RARE_STRS:
            out[col] = _intern_iter(map(g[col], args), n)
        out["name"] = _intern_iter(map(g["name"], evs), n)
    return _finish(out, args)


def _finish(out: dict, args: list) -> dict:
    """Old step spelling, impossible times dropped, shapes of the ops that need them."""
    _old_steps_as_annotations(out)
    n = out["n"]
    # Shapes, dtypes and scalar arguments are kept only for the ops that need them (``_SHAPE_OPS``), as JSON text.
    codes, table = out["name"]
    wanted = np.array([_wants_shapes(t) for t in table] + [False])[codes] & (out["kind"] <= 1)
    rows = np.flatnonzero(wanted)
    picked = list(map(args.__getitem__, rows.tolist()))
    for col in RAW_COLS:
        raws = list(map(_G[col], picked))
        vals = [bytes(v).decode() if v else None for v in raws] if any(raws) else []  # an absent key reads b""
        if any(vals):
            full = np.empty(n, object)  # all None
            full[rows] = _objects(vals)
            out[col] = full
        else:
            out[col] = None
    _drop_impossible_times(out)
    _drop_impossible_steps(out)
    return out


def _objects(values: list) -> np.ndarray:
    """A list as a 1-d object array, element for element (``np.array`` would split equal-length sequences)."""
    arr = np.empty(len(values), object)
    arr[:] = values
    return arr


# Microseconds beyond any clock a trace uses (the Unix epoch reaches 1.8e15 us in 2027): a damaged value.
_MAX_US = 1e17
# Step numbers beyond this are no profiler's count (2^53, what a float holds exactly: 285 years of 1 us steps);
# the digits are not even read past 16 (a step name of a MB of digits costs nothing).
MAX_STEP = 1 << 53
_STEP_NUMBER = re.compile(r"ProfilerStep#(\d{1,16})")


def step_number(name) -> int | None:
    """N of a ``ProfilerStep#N`` name when N is a step number a profiler can write (see ``MAX_STEP``), else None."""
    m = _STEP_NUMBER.fullmatch(name) if isinstance(name, str) else None
    return int(m.group(1)) if m and int(m.group(1)) <= MAX_STEP else None


def _drop_impossible_times(out: dict) -> None:
    """Events whose ts or dur is not a time (NaN, infinite, negative duration, beyond any clock) are dropped."""
    ts, dur = out["ts"], out["dur"]
    ok = np.isfinite(ts) & np.isfinite(dur) & (dur >= 0) & (np.abs(ts) < _MAX_US) & (dur < _MAX_US)
    if not ok.all():
        out["unmodelled"] = {**(out.get("unmodelled") or {}), IMPOSSIBLE: int((~ok).sum())}
        _keep(out, ok)


def _keep(out: dict, ok: np.ndarray) -> None:
    """Only the rows where ``ok``."""
    for col in NUM_COLS:
        if col in out:  # else in a lookup's codes, kept below
            out[col] = out[col][ok]
    if LOOKUPS in out:
        out[LOOKUPS] = [(codes[ok], values) for codes, values in out[LOOKUPS]]
    for col in STR_COLS:
        codes, table = out[col]
        out[col] = (codes[ok], table)
    for col in RAW_COLS:
        if out[col] is not None:
            out[col] = out[col][ok]
    out["n"] = int(ok.sum())


def _drop_impossible_steps(out: dict) -> None:
    """``ProfilerStep#N`` events whose N no profiler writes (``MAX_STEP``) are dropped, their name with them, so
    that nothing downstream reads a step number that does not fit an integer column."""
    codes, table = out["name"]
    bad = [i for i, t in enumerate(table) if isinstance(t, str) and _STEP_NAME.match(t) and step_number(t) is None]
    if not bad:
        return
    _keep(out, ~np.isin(codes, bad))
    codes, table = out["name"]
    kept = np.setdiff1d(np.arange(len(table)), bad)
    remap = np.full(len(table) + 1, -1, np.int32)
    remap[kept] = np.arange(len(kept), dtype=np.int32)
    out["name"] = (remap[codes], [table[i] for i in kept])  # code -1 picks the trailing -1


def _old_steps_as_annotations(out: dict) -> None:
    codes, table = out["name"]
    step_codes = [i for i, t in enumerate(table) if isinstance(t, str) and _STEP_NAME.match(t)]
    if step_codes:
        old = np.isin(codes, step_codes) & (out["kind"] == 0)  # Kind.CPU_OP
        out["kind"][old] = 1  # Kind.USER_ANNOTATION
