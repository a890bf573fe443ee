"""What a trace file says about where it comes from, read cheaply: which process, rank, job and time span.

Runs, ranks and windows are decided from these facts (``runs.plan_runs``) before any file is decoded in full. A
Kineto file writes its metadata and the first CPU events (the first ``ProfilerStep``) at its head and the window's
end at its tail, so a large file is read at both ends only: the first and last MB of its text are decoded (a
gzip file is still inflated to reach its tail, but not parsed). Small files, and layouts that cannot be cut at
event boundaries, are decoded whole.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import TraceFileError
from . import meta as M
from .columns import step_number
from .compressed import _first_line
from .decode import _EVENTS_KEY, _detect_layout, decode_meta, decode_piece, decode_whole, iter_bytes
from .limits import DEFAULT_LIMITS, FinalFileError, Limits, no_nul

HEAD_BYTES = 1 << 20
TAIL_BYTES = 1 << 20
WHOLE_BYTES = 4 << 20  # files up to this size (decompressed) are decoded whole
# tensorboard_trace_handler: "<worker>.<time>.pt.trace.json[.gz]"; worker defaults to "<host>_<pid>".
_HANDLER_NAME = re.compile(r"^(?P<worker>.+?)\.(?P<time>\d{10,19})\.pt\.trace\.json")
_HOST_PID = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)$")
_BASE_KEY = re.compile(rb'"baseTimeNanoseconds"\s*:\s*\d')
# Device activity the analyses do not model (Kineto's names for other accelerators' runtimes and ops).
_OTHER_DEVICE = re.compile(r"mtia|xpu|hpu|privateuse|glow|npu|mlu|tpu", re.IGNORECASE)
_OTHER_DEVICE_CATS = re.compile(rb'"cat"\s*:\s*"([^"]*(?:mtia|xpu|hpu|privateuse|glow|npu|mlu|tpu)[^"]*)"', re.I)
# ts values this large (microseconds) are on the Unix epoch already (old traces without baseTimeNanoseconds).
_EPOCH_US = 1e15  # 2001-09-09


@dataclass
class FileFacts:
    """One file's identity: every field is None when the file does not say."""

    path: str
    rank: int | None = None
    world_size: int | None = None
    job: tuple = ()
    host: str | None = None
    pid: int | None = None
    first_step: int | None = None
    last_step: int | None = None
    start_ns: int | None = None  # absolute time of the first / last event seen (baseTimeNanoseconds + ts)
    end_ns: int | None = None
    clock: str = "absolute"  # "absolute" (baseTimeNanoseconds or epoch ts) or "relative" (no common origin)
    name_time_ns: int | None = None  # the time in a tensorboard_trace_handler file name
    worker: str | None = None  # the worker name in that file name
    other_devices: list[str] = field(default_factory=list)  # categories of accelerators the report does not model
    error: str | None = None  # why the file could not be read (it is skipped later with this reason)
    notes: list[str] = field(default_factory=list)  # one line each: what the file says that is read otherwise

    @property
    def folder(self) -> str:
        return str(Path(self.path).parent)

    @property
    def sort_time(self) -> float:
        for t in (self.start_ns, self.name_time_ns):
            if t is not None:
                return float(t)
        try:
            return float(os.stat(self.path).st_mtime_ns)
        except OSError:
            return 0.0


def peek(path: str | os.PathLike, limits: Limits = DEFAULT_LIMITS) -> FileFacts:
    """The facts of one file; never raises (an unreadable file gets ``error``)."""
    path = str(path)
    facts = FileFacts(path=path)
    _from_name(facts)
    try:
        head, tail, whole = _ends(path, facts.name_time_ns, limits)
        if whole:  # the head is all of the text: decoded as read, not read again
            cols, meta, _ = decode_whole(path, data=head)
            parts = [cols]
            text = head
        else:
            try:
                meta, parts = _decode_ends(path, head, tail, limits)
            except (ValueError, TypeError):  # cut at the wrong places (another layout): decode it all
                cols, meta, _ = decode_whole(path, limits=limits)
                parts = [cols]
            text = head + (tail or b"")
    except TraceFileError as exc:
        facts.error = exc.reason
        return facts
    except Exception as exc:  # noqa: BLE001 - a file we cannot peek is decided on by its full decode later
        facts.error = f"could not be read ({type(exc).__name__}: {_first_line(exc)})"
        return facts
    if not any(p["n"] for p in parts):
        facts.error = "no usable trace events (no complete 'X' events of a known kind)"
        return facts
    _from_meta(facts, meta, limits.max_world_size)
    _from_events(facts, parts, M.base_ns(meta))
    if tail is None and facts.name_time_ns is not None and facts.clock == "absolute":
        facts.end_ns = max(facts.end_ns or 0, facts.name_time_ns)  # written when the window ended
    facts.other_devices = sorted({m.decode("utf-8", "replace") for m in _OTHER_DEVICE_CATS.findall(text)})
    return facts


def _from_name(facts: FileFacts) -> None:
    m = _HANDLER_NAME.match(Path(facts.path).name)
    if not m:
        return
    facts.worker = m.group("worker")
    t = int(m.group("time"))
    digits = len(m.group("time"))
    facts.name_time_ns = t * {13: 10**6, 16: 10**3}.get(digits, 1) if digits in (13, 16, 19) else None


def _from_meta(facts: FileFacts, meta: dict, max_world: int) -> None:
    facts.rank = M.rank_of(meta, facts.path)
    facts.world_size = M.world_of(meta, max_world)
    facts.job = M.job_identity(meta, max_world)
    facts.host = M.host_of(meta)
    odd = M.implausible_world(meta, max_world)
    if odd is not None:
        facts.notes.append(f"{Path(facts.path).name}: its metadata's world size {odd:,} is implausible (above "
                           f"max_world_size {max_world:,}): read as unknown")


def _ends(path: str, name_time_ns: int | None, limits: Limits) -> tuple[bytes, bytes | None, bool]:
    """(head, tail, whole): the first and last bytes of the text, or all of it (``whole``) for a small file.

    A plain file is read at its two ends. A compressed one is inflated to its end, unless its head already holds
    the clock origin and its name the time it was written (``tensorboard_trace_handler``): then the tail is not
    needed (None) and the name's time stands for the window's end.
    """
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        first = f.read(1)
        if first in (b"{", b"[", b" ", b"\n", b"\r", b"\t") and size > WHOLE_BYTES:
            head = first + f.read(HEAD_BYTES - 1)
            f.seek(size - TAIL_BYTES)
            tail = f.read(TAIL_BYTES)
            no_nul(head, 0, path)  # a NUL byte: damaged, preallocated or sparse, named before any decoding
            no_nul(tail, size - TAIL_BYTES, path)
            return head, tail, False
    head, tail = bytearray(), bytearray()
    blocks = iter_bytes(path, limits=limits)
    for block in blocks:
        if len(head) < WHOLE_BYTES:
            take = WHOLE_BYTES - len(head)
            head += block[:take]
            block = block[take:]
            if len(head) >= WHOLE_BYTES and name_time_ns is not None and _base_in_header(head):
                blocks.close()
                return bytes(head[:HEAD_BYTES]), None, False
        if block:
            tail += block
            if len(tail) > 2 * TAIL_BYTES:
                del tail[: len(tail) - TAIL_BYTES]
    if not tail:
        return bytes(head), b"", True
    tail = (head[HEAD_BYTES:] + tail)[-TAIL_BYTES:]
    return bytes(head[:HEAD_BYTES]), bytes(tail), False


def _base_in_header(head: bytes) -> bool:
    m = _EVENTS_KEY.search(head)
    return bool(m and _BASE_KEY.search(head, 0, m.start()))


def _decode_ends(path: str, head: bytes, tail: bytes | None, limits: Limits) -> tuple[dict, list[dict]]:
    """Metadata and the whole events in the head and the tail of a large Kineto-layout file."""
    found = _detect_layout(head, path)
    if found is None or found[0].marker is None:
        cols, meta, _ = decode_whole(path, limits=limits)  # a layout we cannot cut: decode it all
        return meta, [cols]
    layout, start = found
    marker = layout.marker
    parts = []
    cut = head.rfind(marker, start)
    if cut > start:
        parts.append(decode_piece(head[start : cut + len(marker) - 1]))
    if tail is None:  # the head says all that is needed (see _ends)
        return decode_meta(layout.header, b"}", path), parts
    first = tail.find(marker)
    last = tail.rfind(marker)
    m = layout.close.search(tail, max(last, 0))
    trailer = b"}"
    if m is None:
        try:  # the array does not close where Kineto closes it: valid in another layout, or truncated
            cols, meta, _ = decode_whole(path, limits=limits)
        except FinalFileError:
            raise
        except TraceFileError:
            raise TraceFileError(path, "truncated JSON (the traceEvents array never closes)") from None
        return meta, [cols]
    if m is not None:
        trailer = tail[m.end():]
        if 0 <= first < m.start():
            parts.append(decode_piece(tail[first + len(marker) : m.start() + len(marker) - 1]))
    try:
        meta = decode_meta(layout.header, trailer, path)
    except TraceFileError:
        meta = decode_meta(layout.header, b"}", path) if layout.header else {}
    return meta, parts


def _from_events(facts: FileFacts, parts: list[dict], base: int | None) -> None:
    ts = np.concatenate([p["ts"] for p in parts]) if parts else np.empty(0)
    if not len(ts):
        return
    end = ts + np.concatenate([p["dur"] for p in parts])
    kind = np.concatenate([p["kind"] for p in parts])
    pid = np.concatenate([p["pid"] for p in parts])
    cpu = (kind <= 1) & (pid >= 0)
    if cpu.any():
        vals, counts = np.unique(pid[cpu], return_counts=True)
        facts.pid = int(vals[np.argmax(counts)])
    steps = []
    for p in parts:
        codes, table = p["name"]
        nums = {i: n for i, t in enumerate(table) if (n := step_number(t)) is not None}
        if nums:
            steps.extend(nums[c] for c in np.unique(codes[(p["kind"] <= 2) & np.isin(codes, list(nums))]))
    if steps:
        facts.first_step, facts.last_step = min(steps), max(steps)
    lo, hi = float(np.min(ts)), float(np.max(end))
    if base is None and lo < _EPOCH_US:
        facts.clock = "relative"
    b = base or 0
    facts.start_ns = b + int(lo * 1000)
    facts.end_ns = b + int(hi * 1000)
