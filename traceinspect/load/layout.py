"""A trace file's layout: where its ``traceEvents`` array is, and how to cut it into pieces at event boundaries.

Kineto writes one event per few lines, so the array splits cleanly into pieces that are decoded independently
(``decode.decode_piece``), by byte range in plain files (``plan_ranges``) or streamed from a compressed one
(``read_pieces``). A file in another layout has no safe cut points: ``_detect_layout`` says so and the reader decodes
it whole (``decode.decode_whole``), with the same result.
"""

from __future__ import annotations

import json
import os
import re
from typing import Iterator

import msgspec

from ..errors import TraceFileError
from .compressed import iter_bytes
from .limits import DEFAULT_LIMITS, FinalFileError, Limits, mb

PIECE_BYTES = 8 << 20  # decoded JSON per piece handed to a decoder (small pieces keep workers small)


_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')


class Layout:
    """Where the event array is and how to find event boundaries in it."""

    def __init__(self, header: bytes, marker: bytes | None, close: re.Pattern | None):
        self.header = header  # the object's text up to (not including) the array's "["; b"" for a bare list
        self.marker = marker  # bytes that end an event and are followed by ","
        self.close = close  # regex matching the end of the last event and the array's "]"


def _detect_layout(buf: bytes, path: str) -> tuple[Layout, int] | None:
    """Find the start of the event array in the first bytes; None if more bytes are needed."""
    stripped = buf.lstrip()
    if not stripped:
        return None
    if stripped[:1] == b"[":
        start = len(buf) - len(stripped) + 1
        header = b""
    elif stripped[:1] == b"{":
        m = _EVENTS_KEY.search(buf)
        if m is None:
            return None
        start = m.end()
        header = buf[: start - 1]
    else:
        raise TraceFileError(path, "not JSON (does not start with '{' or '[')")
    # The whitespace between "[" and the first "{" tells the indentation of events.
    i = start
    while i < len(buf) and buf[i : i + 1] in b" \t\r\n":
        i += 1
    if i >= len(buf):
        return None
    ws = buf[start:i]
    if b"\n" in ws and buf[i : i + 1] == b"{":
        indent = ws.rsplit(b"\n", 1)[1]
        marker = b"\n" + indent + b"},"
        close = re.compile(re.escape(b"\n" + indent + b"}") + rb"\s*\]")
        return Layout(header, marker, close), start
    return Layout(header, None, None), start


TOO_DEEP = "JSON nested too deeply to read (past the interpreter's recursion limit, about 1000 levels)"
_NON_FINITE = re.compile(rb"\bNaN\b|\bInfinity\b")
PYTHON_BYTES = 4 * PIECE_BYTES  # text read by the standard library at most: its objects take ~10x the text


def python_json(text):
    """Text msgspec refuses that Python's reader takes, read by it: JSON with ``NaN`` / ``Infinity`` literals,
    which ``json.dumps`` writes for non-finite floats; None for anything else (or text above ``PYTHON_BYTES``)."""
    with memoryview(text) as view:
        if view.nbytes > PYTHON_BYTES:
            return None
    raw = bytes(text)
    if not _NON_FINITE.search(raw):
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def one_events_array(text, path: str) -> None:
    """A document with the ``traceEvents`` key twice is refused: JSON readers keep the last, a reader that cuts
    the file the first, so which events are meant is unknown (keys elsewhere repeated: the last wins)."""
    found = _EVENTS_KEY.finditer(text)
    if next(found, None) is not None and next(found, None) is not None:
        raise TraceFileError(path, "the 'traceEvents' key appears twice: which array holds the events is unknown")


def read_pieces(path: str, piece_bytes: int = PIECE_BYTES, *, limits: Limits = DEFAULT_LIMITS
                ) -> tuple[Iterator[bytes], dict]:
    """Stream a trace file as event pieces.

    Returns an iterator of pieces (each a comma-separated run of whole events) and a dict that is filled, once the
    iterator is exhausted, with ``header``/``trailer`` bytes (the object around the array) and ``bytes`` (total
    decompressed size). Layouts we cannot cut are yielded as one piece. Once a piece was cut, text that runs on
    for ``limits.max_event_bytes`` without an event boundary stops the file (``FinalFileError``): no event is that
    long, and holding it would cost memory without bound.
    """
    info: dict = {"header": b"", "trailer": b"", "bytes": 0}

    def gen() -> Iterator[bytes]:
        blocks = iter_bytes(path, limits=limits)
        buf = bytearray()  # grows in place: appending is amortised, not a copy of everything read so far
        layout = None
        for block in blocks:
            info["bytes"] += len(block)
            buf += block
            found = _detect_layout(buf, path)
            if found is not None:
                layout, start = found
                info["header"] = layout.header
                del buf[:start]
                break
            if len(buf) > (64 << 20):
                raise TraceFileError(path, "no 'traceEvents' array in the first 64 MB: not a Chrome trace")
        if layout is None:
            if not buf.strip():
                raise TraceFileError(path, "empty file")
            raise TraceFileError(path, "not a Chrome trace (no 'traceEvents' array)")
        if layout.marker is None:  # a layout we cannot cut: read all, decode whole
            for block in blocks:
                info["bytes"] += len(block)
                buf += block
            events, trailer = _split_whole(layout.header, bytes(buf), path)
            info["trailer"] = trailer
            if events.strip():
                yield events
            return
        marker = layout.marker
        searched = 0  # the bytes of buf already searched for a boundary (less the marker's length)
        for block in blocks:
            info["bytes"] += len(block)
            buf += block
            if len(buf) >= piece_bytes:
                cut = buf.rfind(marker, searched)
                if cut > 0:
                    end = cut + len(marker) - 1  # index of the "," after the event's "}"
                    info["yielded"] = True
                    yield bytes(buf[:end])
                    del buf[: end + 1]
                    searched = 0
                else:
                    searched = max(0, len(buf) - len(marker))
                    if info.get("yielded") and len(buf) > limits.max_event_bytes:
                        raise FinalFileError(path, f"{mb(len(buf))} of text without an event boundary after byte "
                                                   f"{info['bytes'] - len(buf):,} (limit max_event_bytes, "
                                                   "docs/folders.md)")
        # The rest holds the last events, the array's "]" and the object's trailing keys.
        buf = bytes(buf)
        last = buf.rfind(marker)
        m = layout.close.search(buf, max(last, 0))
        if m is None:
            if buf.strip().startswith(b"]"):  # an empty array
                info["trailer"] = buf.strip()[1:]
                return
            if not info.get("yielded"):
                # The events are not laid out as the first one suggested (one event a line, mixed indents...):
                # nothing was cut yet, so the rest is the whole array: decode it whole.
                events, trailer = _split_whole(layout.header, buf, path)
                info["trailer"] = trailer
                if events.strip():
                    yield events
                return
            raise TraceFileError(path, "truncated JSON (the traceEvents array never closes)")
        events = buf[: m.start() + len(marker) - 1]
        info["trailer"] = buf[m.end() :]
        if events.strip():
            yield events

    return gen(), info


def _split_whole(header: bytes, rest: bytes, path: str) -> tuple[bytes, bytes]:
    """For layouts we cannot cut: decode the document's outline, returning the events' text and a trailer."""
    try:
        if not header:  # a bare list of events
            raw = msgspec.json.decode(b"[" + rest, type=msgspec.Raw)
            return bytes(raw).strip()[1:-1], b""
        parts = msgspec.json.decode(header + b"[" + rest, type=dict[str, msgspec.Raw])
    except RecursionError:
        raise TraceFileError(path, TOO_DEEP) from None
    except msgspec.DecodeError as exc:
        raise TraceFileError(path, f"invalid or truncated JSON ({exc})") from None
    events = bytes(parts.pop("traceEvents")).strip()[1:-1]
    # Re-emit the other keys as a trailer so decode_meta sees one object: header already holds the keys before
    # the array, so only keys not in it are needed; duplicates are harmless (the last wins, with equal values).
    trailer = b"".join(b"," + msgspec.json.encode(k) + b":" + bytes(v) for k, v in parts.items()) + b"}"
    return events, trailer


def decode_meta(header: bytes, trailer: bytes, path: str) -> dict:
    """The trace object's own keys (distributedInfo, deviceProperties, baseTimeNanoseconds, ...)."""
    if not header:
        return {}
    text = header + b"[]" + trailer
    one_events_array(text, path)
    try:
        meta = msgspec.json.decode(text)
    except RecursionError:
        raise TraceFileError(path, TOO_DEEP) from None
    except msgspec.DecodeError:
        meta = python_json(text)
        if meta is None:
            raise TraceFileError(path, "truncated or invalid JSON after the traceEvents array") from None
    if not isinstance(meta, dict):
        raise TraceFileError(path, "not a Chrome trace object")
    meta.pop("traceEvents", None)
    return meta


def plan_ranges(path: str, piece_bytes: int = PIECE_BYTES, *, limits: Limits = DEFAULT_LIMITS) -> dict | None:
    """Header, trailer and event byte ranges of a plain Kineto file; None when it is gzip or not cuttable.

    Event boundaries are looked for at most ``limits.max_event_bytes`` away from where one is expected (the array's
    end, the next piece's end): where there is none (a damaged or sparse file) the streaming reader says why,
    without this scan having read (and mapped) the whole file."""
    import mmap

    with open(path, "rb") as f:
        if f.read(1) not in (b"{", b"[", b" ", b"\n", b"\r", b"\t"):
            return None  # compressed, a byte-order mark, or not JSON: the streaming reader handles (or names) it
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return None
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            for n in (1 << 20, 64 << 20):  # the array starts after the header: the first MB holds it, nearly always
                found = _detect_layout(mm[: min(size, n)], path)
                if found is not None or n >= size:
                    break
            if found is None or found[0].marker is None:
                return None
            layout, start = found
            marker = layout.marker
            last = mm.rfind(marker, max(start, size - limits.max_event_bytes))
            if last < 0 and size - start > limits.max_event_bytes:
                return None
            tail_from = max(last, start)
            m = layout.close.search(mm[tail_from:])
            if m is None:
                return None  # let the streaming reader say what is wrong
            events_end = tail_from + m.start() + len(marker) - 1
            trailer = mm[tail_from + m.end():]
            ranges = []
            pos = start
            while pos < events_end:
                target = pos + piece_bytes
                if target >= events_end:
                    ranges.append((pos, events_end))
                    break
                cut = mm.rfind(marker, pos, target)
                if cut <= pos:
                    far = min(events_end, target + limits.max_event_bytes)
                    cut = mm.find(marker, target, far)
                    if cut < 0:
                        if far < events_end:
                            return None  # no boundary for longer than any event: the streaming reader says why
                        ranges.append((pos, events_end))
                        break
                end = cut + len(marker) - 1  # index of the "," after the event's "}"
                ranges.append((pos, end))
                pos = end + 1
    return {"header": layout.header, "trailer": trailer, "ranges": ranges, "bytes": size}
