"""Bytes of one trace file -> typed columns, fast.

The hot path of the product. A Kineto file is one JSON object whose ``traceEvents`` array holds one event per few
lines. We stream the (possibly gzipped) file, cut the array at event boundaries into pieces of a few tens of MB,
decode each piece with a typed msgspec decoder that only materializes the fields and argument keys the analyses
use, and turn the piece into numpy columns at once, so a decoded event list never outlives its piece. Pieces are
independent, so they can be decoded on several cores. Files in another layout (one line, another indent) are
decoded whole with the same typed decoder.
"""

from __future__ import annotations

import json
import os
from typing import Any, Union

import msgspec
import numpy as np

from ..errors import TraceFileError
from .columns import NUM_COLS, RAW_COLS, STR_COLS, columns_from_events, columns_from_tagged  # noqa: F401
from .compressed import _first_line, iter_bytes  # noqa: F401 - iter_bytes is part of this module's interface
from .limits import DEFAULT_LIMITS, Limits
from .layout import (PIECE_BYTES, _EVENTS_KEY, Layout, _detect_layout, _split_whole, decode_meta,  # noqa: F401
                     plan_ranges, python_json, read_pieces)  # (the file's layout and pieces: this module's interface)
from .layout import TOO_DEEP, one_events_array
from . import instants as _instants


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
RAW_ARG_FIELDS = (("in_dims", "Input Dims"), ("in_types", "Input type"),  # kept as raw JSON in both
                  ("in_concrete", "Concrete Inputs"))
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


def _tagged_union() -> Any:
    """Events told apart by their phase while decoding: a complete event ("X") gets every field, any other phase
    of the Trace Event Format an empty struct (its keys skipped unread, no objects made), whose ``cat``, ``name``,
    ``pid`` and ``tid`` are None on the class so one pass reads every event alike. A phase not listed here, or an
    event without one, fails the whole piece, which then takes the untagged decoder."""
    fields = [(attr, typ, default) for attr, typ, default in EVENT_FIELDS if attr != "ph"] + [("args", Args, Args())]
    complete = msgspec.defstruct("Complete", fields, gc=False, tag_field="ph", tag="X")
    # An instant event keeps its name, thread, time and the allocator's figures (load/instants.py); its category
    # stays None on the class, so the columns of complete events never take it.
    inst = [(attr, typ, default) for attr, typ, default in EVENT_FIELDS if attr in ("name", "pid", "tid", "ts")]
    instant = msgspec.defstruct("Instant", inst + [("args", _instants.MemoryArgs, _instants.MemoryArgs())], gc=False,
                                tag_field="ph", tag="i", namespace={"cat": None})
    others = [msgspec.defstruct(f"Phase{i}", [], gc=False, tag_field="ph", tag=ph,
                                namespace={"cat": None, "name": None, "pid": None, "tid": None})
              for i, ph in enumerate(_OTHER_PHASES) if ph != "i"]
    return Union[tuple([complete, instant, *others])]  # noqa: UP007 - a union built at run time


_OTHER_PHASES = ("B", "E", "i", "I", "C", "b", "n", "e", "s", "t", "f", "P", "O", "N", "D", "M", "V", "v", "R", "c",
                 "(", ")")
_TAGGED = msgspec.json.Decoder(list[_tagged_union()])
_STRICT = msgspec.json.Decoder(list[Event])
_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
_LOOSE_ONE = msgspec.json.Decoder(LooseEvent)
_NOARGS_ONE = msgspec.json.Decoder(_NoArgsEvent)
_LOOSE = msgspec.json.Decoder(list[LooseEvent])


def decode_piece(piece: bytes, compact: bool = False) -> dict:
    """Decode a run of comma-separated events (no brackets) into columns (``compact``: see ``decode_array``)."""
    return decode_array(b"[" + piece + b"]", compact)


def decode_array(data: bytes, compact: bool = False) -> dict:
    """Decode a JSON array of events into columns: tagged by phase and typed, else typed, else loosely typed, else
    one event at a time (each a slower path for files that the faster one cannot take). Text nested too deeply
    raises ``msgspec.DecodeError`` saying so; ``NaN`` and ``Infinity`` (which Python's ``json.dumps`` writes for
    non-finite floats) are read by the standard library in pieces of bounded size (``_decode_python``).

    ``compact``: columns of a few distinct values may come as codes into them (``columns.LOOKUPS``), for a piece
    that a ``spill.ColumnSink`` joins (it makes them whole)."""
    try:
        return _decode_array(data, compact)
    except RecursionError:
        raise msgspec.DecodeError(TOO_DEEP) from None


def _decode_array(data, compact: bool = False) -> dict:
    try:
        return columns_from_tagged(_TAGGED.decode(data), compact)
    except msgspec.ValidationError:
        pass
    except msgspec.DecodeError as exc:
        return _decode_python(data, exc)
    try:
        return _with_instants(columns_from_events(_STRICT.decode(data)), data)
    except msgspec.ValidationError:
        pass
    try:
        return _with_instants(columns_from_events(_LOOSE.decode(data), loose=True), data)
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
    return _with_instants(columns_from_events(events, loose=True), data)


def _with_instants(cols: dict, data) -> dict:
    """The slower paths' columns with the piece's memory instants (load/instants.py), read in a second look."""
    cols["instants"] = _instants.from_bytes(data)
    return cols


def _decode_python(data, exc: msgspec.DecodeError) -> dict:
    """Events msgspec refuses as malformed JSON but Python's reader takes (``layout.python_json``: ``NaN`` /
    ``Infinity`` literals); anything else malformed raises msgspec's error ``exc``."""
    events = python_json(data)
    if not isinstance(events, list):
        raise exc
    return python_events(events)


def python_events(events: list) -> dict:
    """Columns of events read by Python's reader. Each event is converted alone, so one of an odd shape loses only
    itself; non-finite times are then dropped like any impossible time (load/columns.py)."""
    out = []
    found = _instants.from_python(events)
    for e in events:
        args = e.get("args") if isinstance(e, dict) else None
        for _, key in RAW_ARG_FIELDS if isinstance(args, dict) else ():
            if key in args:  # kept as JSON text, as msgspec keeps them
                args[key] = msgspec.Raw(json.dumps(args[key], separators=(",", ":")).encode())
        try:
            out.append(msgspec.convert(e, LooseEvent))
        except msgspec.ValidationError:
            try:
                ev = msgspec.convert(e, _NoArgsEvent)
            except msgspec.ValidationError:
                continue
            out.append(LooseEvent(ph=ev.ph, cat=ev.cat, name=ev.name, pid=ev.pid, tid=ev.tid, ts=ev.ts, dur=ev.dur))
    cols = columns_from_events(out, loose=True)
    cols["instants"] = found
    return cols


def meta_events(events_json: bytes) -> list[_MetaEvent]:
    return [e for e in msgspec.json.decode(events_json, type=list[_MetaEvent]) if e.ph == "M"]


def decode_whole(path: str, *, limits: Limits = DEFAULT_LIMITS, data: bytes | None = None
                 ) -> tuple[dict, dict, int]:
    """The whole document decoded at once, for any valid JSON layout: (columns, meta, decompressed bytes).

    The text is held once (the events are decoded where they lie in it, not copied out): a plain file costs its
    size, a compressed one at most its inflate cap (``limits``). ``data``: the file's text (``iter_bytes``) when
    the caller has read it all already."""
    if data is None:
        data = b"".join(iter_bytes(path, limits=limits))
    text = data.lstrip()
    if not text:
        raise TraceFileError(path, "empty file")
    if text[:1] not in (b"{", b"["):
        raise TraceFileError(path, "not JSON (does not start with '{' or '[')")
    if text[:1] == b"{":
        one_events_array(text, path)
    try:
        if text[:1] == b"[":
            return decode_array(text), {}, len(data)  # NaN and too deep: see decode_array
        parts = msgspec.json.decode(text, type=dict[str, msgspec.Raw])
    except RecursionError:
        raise TraceFileError(path, TOO_DEEP) from None
    except msgspec.DecodeError as exc:
        doc = python_json(text)
        if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
            raise TraceFileError(path, f"invalid or truncated JSON ({_first_line(exc)})") from None
        events = doc.pop("traceEvents")
        return python_events(events), doc, len(data)
    size = len(data)
    del data, text  # the events' Raw keeps the text alive; nothing else needs it
    events = parts.pop("traceEvents", None)
    if events is None:
        raise TraceFileError(path, "not a Chrome trace (no 'traceEvents' array)")
    with memoryview(events) as view:  # a Raw value starts at its first byte: no copy to look at it
        first = bytes(view[:1])
    if first != b"[":
        raise TraceFileError(path, "not a Chrome trace ('traceEvents' is not an array)")
    meta = {k: msgspec.json.decode(v) for k, v in parts.items()}
    return decode_array(events), meta, size


# --------------------------------------------------------------------------------------------------------------
# Plain (uncompressed) files: plan pieces as byte ranges, so worker processes read them from the page cache
# themselves instead of receiving the bytes through a pipe.


def decode_range(path: str, start: int, end: int) -> dict:
    """Decode the events in bytes [start, end) of a plain file (run in a worker process) into a piece's columns,
    compact (``decode_array``) for the ``spill.ColumnSink`` that joins them.

    ``pread`` into a private buffer rather than a memory map: mapped file pages would stay resident in the worker
    and count against its memory for the whole file it walks through. The buffer is left unfilled until read into
    (a ``bytearray`` is zeroed first: 8 MB written twice a piece). Nothing decoded keeps a reference to it: the
    columns are numbers and strings made from it.
    """
    n = end - start
    buf = np.empty(n + 2, np.uint8)
    with memoryview(buf) as text:
        # The piece is read between the brackets that make it an array, so it is never copied to add them.
        text[0], text[n + 1] = 0x5B, 0x5D  # "[", "]"
        fd = os.open(path, os.O_RDONLY)
        try:
            got = 0
            while got < n:
                with text[1 + got : n + 1] as rest:
                    k = os.preadv(fd, [rest], start + got)
                if k == 0:
                    raise TraceFileError(path, "file shrank while being read")
                got += k
        finally:
            os.close(fd)
        return decode_array(text, compact=True)  # for a ColumnSink, always
