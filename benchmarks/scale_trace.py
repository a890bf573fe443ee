#!/usr/bin/env python3
"""Make large benchmark inputs by replicating the profiler steps of a real Kineto trace.

Why: the interesting inputs for a trace analyzer are 0.2-5 GB per rank, and real captures that
large cannot be shipped in the repository. Replicating the steps of a small *real* capture keeps
everything an analyzer reacts to (event mix, argument shapes, nesting, CPU/GPU lag, NCCL kernels,
Kineto's byte layout) while growing the file to any size. The output is labelled as a scaled copy
in a top-level ``"traceinspect_scaled"`` key, so nobody mistakes it for a capture.

What is replicated: the *region* = every event that belongs to the ``ProfilerStep#N`` windows
(CPU ``user_annotation`` events). CPU-side events belong to it by timestamp; device events
(kernels, memcpys, ...) follow the runtime call that launched them (by ``correlation``), so a
kernel that runs after its step's CPU side ended still travels with its step; flow arrows follow
their correlation or their start. Events before the first step (prologue) and after the last one
(epilogue) are written once; the epilogue is moved behind the last copy, and spans that enclose
the whole region (the ``PyTorch Profiler (0)`` span) are stretched to enclose all copies. Without
any ``ProfilerStep`` the whole trace is one window.

Copy ``j`` (0-based, copy 0 is the original) gets:

* ``ts`` + ``j * span``, where ``span`` is the extent of the region (earliest start to latest end,
  including the GPU tail), rounded up to a whole microsecond so integer timestamps stay integers
  and fractional ones keep their exact digits;
* ``ProfilerStep#N`` -> ``ProfilerStep#(N + j * n_steps)`` (CPU and GPU annotations alike), so
  step numbers continue;
* id-like values (``correlation``, ``External id``/``external id``, flow ``id``, Python ids,
  record-function ids, event indices) + ``j * D_ids``, and counters (``Sequence number``,
  ``Seq``) + ``j * D_counter``, where each ``D`` is the whole trace's value range. Every copy's
  values are therefore disjoint from every other copy's and from the prologue/epilogue's, and
  links inside one copy (kernel -> launch, flow start -> end, fwd -> bwd) stay intact.

Layout: events are written from the source's own bytes (Kineto's ``  {`` ... ``  },`` layout) with
only the changed numbers substituted; a source in another layout (one event per line, as written
by ``json.dump``) is re-laid out the way Kineto writes. Writing is streamed in bounded chunks, so
memory is bounded by the *source* size, not the output size.

``--ranks N`` writes N rank files for one run (``distributedInfo.rank`` = 0..N-1, ``world_size``
= N); the event bodies are identical across ranks (no skew between ranks), which is fine for a
speed benchmark and says nothing about straggler analysis.

Example::

    python benchmarks/scale_trace.py ../shared/traces/public/hta_diff_control/control.json.gz \\
        --out-dir benchmarks/data/x --target-mb 1000
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

SCALER_VERSION = 1

STEP_RE = re.compile(r"ProfilerStep#(\d+)")
# Categories whose events are the CPU side of a device activity; the activity carries the same
# ``correlation`` and must stay in the same copy as its launch.
LAUNCHER_CAT_SUFFIXES = ("_runtime", "_driver")
# Categories of activities that run on a device (their pid is the device, not the process).
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "gpu_op"}

# Namespaces of numbers that are shifted per copy. "ids" share one offset so that any equality
# between them in the source (e.g. a flow id equal to a correlation, a GPU event's External id equal
# to its CPU op's) survives in every copy.
NS_TS, NS_DUR, NS_IDS, NS_STEP, NS_SEQNO, NS_SEQ = range(6)
ID_ARG_KEYS = {
    "correlation": NS_IDS,
    "External id": NS_IDS,
    "external id": NS_IDS,
    "Python id": NS_IDS,
    "Python parent id": NS_IDS,
    "Record function id": NS_IDS,
    "Ev Idx": NS_IDS,
    "Profiler Event Index": NS_IDS,
    "Sequence number": NS_SEQNO,
    "Seq": NS_SEQ,
}

PROLOGUE, REGION, EPILOGUE = 0, 1, 2

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?"
_STRING = r'"(?:[^"\\]|\\.)*"'
# A key can only be preceded by '{', ',' or whitespace; a '"' inside a string is always escaped, so
# this never matches inside a string value.
_FIELD_RE = re.compile(
    r'(?<=[{,\s])"(ts|dur|id|name|'
    + "|".join(re.escape(k) for k in ID_ARG_KEYS)
    + r')":\s*(' + _NUMBER + "|" + _STRING + ")"
)


# --------------------------------------------------------------------------------------------
# Reading the source


@dataclass
class Source:
    """A parsed source trace plus the exact text of every top-level value and event."""

    path: str
    top: list[tuple[str, str, Any]]  # (key, raw value text, parsed value), in file order
    events: list[dict]
    chunks: list[str]  # raw text of each event ("{ ... }")


def read_text(path: str | os.PathLike) -> str:
    """Whole file as text, gunzipped when it is gzip (by magic bytes, not by name)."""
    with open(path, "rb") as fh:
        data = fh.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data.decode("utf-8")


def load_source(path: str | os.PathLike) -> Source:
    """Parse a Kineto trace keeping the byte spans of each event, so copies can reuse its layout."""
    text = read_text(path)
    dec = json.JSONDecoder()
    pos = _WS.match(text, 0).end()
    if text[pos : pos + 1] != "{":
        raise ValueError(f"{path}: not a JSON object (a Chrome trace in array form is not supported)")
    pos += 1
    top: list[tuple[str, str, Any]] = []
    events: list[dict] = []
    chunks: list[str] = []
    while True:
        pos = _WS.match(text, pos).end()
        if text[pos] == "}":
            break
        if text[pos] == ",":
            pos = _WS.match(text, pos + 1).end()
        key, pos = dec.raw_decode(text, pos)
        pos = _WS.match(text, pos).end()
        if text[pos] != ":":
            raise ValueError(f"{path}: malformed JSON near byte {pos}")
        pos = _WS.match(text, pos + 1).end()
        if key == "traceEvents":
            if text[pos] != "[":
                raise ValueError(f"{path}: traceEvents is not an array")
            start_arr = pos
            pos = _WS.match(text, pos + 1).end()
            if text[pos] == "]":
                pos += 1
            while text[pos - 1] != "]":
                ev, end = dec.raw_decode(text, pos)
                if isinstance(ev, dict):
                    events.append(ev)
                    chunks.append(text[pos:end])
                pos = _WS.match(text, end).end()
                if text[pos] == ",":
                    pos = _WS.match(text, pos + 1).end()
                elif text[pos] == "]":
                    pos += 1
                else:
                    raise ValueError(f"{path}: malformed traceEvents near byte {pos}")
            top.append((key, text[start_arr:pos], None))
        else:
            val, end = dec.raw_decode(text, pos)
            top.append((key, text[pos:end], val))
            pos = end
    if not any(k == "traceEvents" for k, _, _ in top):
        raise ValueError(f"{path}: no traceEvents")
    return Source(str(path), top, events, chunks)


# --------------------------------------------------------------------------------------------
# Deciding what is replicated


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_launcher(ev: dict) -> bool:
    return str(ev.get("cat", "")).endswith(LAUNCHER_CAT_SUFFIXES)


@dataclass
class Plan:
    """Class of every event (prologue/region/epilogue) and the numbers that define the copies."""

    classes: list[int]
    steps: list[int]  # source step numbers, sorted
    r0: float  # region start (first step start)
    r1: float  # region CPU end (last step end)
    span_us: int  # shift between two copies
    ranges: dict[int, int]  # namespace -> D (value range) for the per-copy offsets
    stretch: set[int]  # prologue events whose duration must cover all copies


def plan_copies(src: Source) -> Plan:
    """Classify events into prologue / region / epilogue and compute span and id ranges."""
    evs = src.events
    gpu_pids = {e.get("pid") for e in evs if e.get("cat") in DEVICE_CATS}

    steps: dict[int, tuple[float, float]] = {}
    for e in evs:
        m = STEP_RE.fullmatch(str(e.get("name", "")))
        if (
            m
            and e.get("ph") == "X"
            and e.get("cat") in ("user_annotation", "cpu_op")
            and e.get("pid") not in gpu_pids
            and _num(e.get("ts"))
        ):
            steps[int(m.group(1))] = (e["ts"], e["ts"] + (e.get("dur") or 0))

    def is_global(e: dict) -> bool:
        return e.get("ph") == "M" or e.get("cat") == "Trace" or (e.get("ph") == "i" and e.get("s") == "g")

    if steps:
        r0 = min(a for a, _ in steps.values())
        r1 = max(b for _, b in steps.values())
    else:  # the whole trace is one window
        acts = [e for e in evs if not is_global(e) and _num(e.get("ts"))]
        if not acts:
            raise ValueError(f"{src.path}: no events with timestamps")
        r0 = min(e["ts"] for e in acts)
        r1 = max(e["ts"] + (e.get("dur") or 0) for e in acts) + 1e-9

    def by_ts(e: dict) -> int:
        ts = e.get("ts")
        if not _num(ts) or ts < r0:
            return PROLOGUE
        return REGION if ts < r1 else EPILOGUE

    classes = [PROLOGUE] * len(evs)
    launch_class: dict[Any, int] = {}
    for i, e in enumerate(evs):
        if e.get("ph") == "M":
            continue
        if is_global(e):
            classes[i] = PROLOGUE if (not _num(e.get("ts")) or e["ts"] <= (r0 + r1) / 2) else EPILOGUE
            continue
        classes[i] = by_ts(e)
        if _is_launcher(e):
            corr = (e.get("args") or {}).get("correlation")
            if corr is not None:
                launch_class[corr] = classes[i]

    # Device activities follow their launch; step annotations on the GPU are always in the region.
    for i, e in enumerate(evs):
        ph = e.get("ph")
        if ph == "M" or is_global(e):
            continue
        args = e.get("args") or {}
        if ph in ("s", "t", "f"):
            fid = e.get("id")
            if fid in launch_class and str(e.get("cat")) in ("ac2g", "async_cpu_to_gpu"):
                classes[i] = launch_class[fid]
            continue
        if "correlation" in args and not _is_launcher(e) and args["correlation"] in launch_class:
            classes[i] = launch_class[args["correlation"]]
        elif e.get("cat") == "gpu_user_annotation":
            m = STEP_RE.fullmatch(str(e.get("name", "")))
            if m and int(m.group(1)) in steps:
                classes[i] = REGION
    # Other flows (fwdbwd, ...): every end of an arrow goes with the arrow's start ("s").
    def is_launch_flow(e: dict) -> bool:
        return e.get("id") in launch_class and str(e.get("cat")) in ("ac2g", "async_cpu_to_gpu")

    flows = [i for i, e in enumerate(evs) if e.get("ph") in ("s", "t", "f") and not is_launch_flow(e)]
    flow_class: dict[tuple, int] = {}
    for i in flows:
        key = (evs[i].get("cat"), evs[i].get("id"))
        if evs[i].get("ph") == "s" or key not in flow_class:
            flow_class[key] = classes[i]
    for i in flows:
        classes[i] = flow_class[(evs[i].get("cat"), evs[i].get("id"))]

    reg = [e for e, c in zip(evs, classes) if c == REGION and _num(e.get("ts"))]
    if not reg:
        raise ValueError(f"{src.path}: nothing to replicate")
    lo = min(e["ts"] for e in reg)
    hi = max(e["ts"] + (e.get("dur") if _num(e.get("dur")) else 0) for e in reg)
    span_us = max(1, math.ceil(hi - lo))

    stretch = {
        i
        for i, (e, c) in enumerate(zip(evs, classes))
        if c == PROLOGUE and e.get("ph") == "X" and _num(e.get("ts")) and _num(e.get("dur")) and e["ts"] + e["dur"] >= r1
    }

    vals: dict[int, list[int]] = {NS_IDS: [], NS_SEQNO: [], NS_SEQ: []}
    for e in evs:
        if e.get("ph") in ("s", "t", "f") and type(e.get("id")) is int:
            vals[NS_IDS].append(e["id"])
        args = e.get("args")
        if isinstance(args, dict):
            for k, ns in ID_ARG_KEYS.items():
                v = args.get(k)
                if type(v) is int:
                    vals[ns].append(v)
    ranges = {ns: (max(v) - min(v) + 1 if v else 0) for ns, v in vals.items()}
    step_nums = sorted(steps)
    ranges[NS_STEP] = (step_nums[-1] - step_nums[0] + 1) if step_nums else 0
    ranges[NS_TS] = span_us
    return Plan(classes, step_nums, r0, r1, span_us, ranges, stretch)


# --------------------------------------------------------------------------------------------
# Templates: an event's text with holes for the numbers that change between copies


@dataclass
class Template:
    """``fmt.format(*(base + offset[ns] for ns, base in fields))`` renders one copy of an event."""

    fmt: str
    fields: tuple[tuple[int, int], ...]


def _esc(s: str) -> str:
    return s.replace("{", "{{").replace("}", "}}")


def _wanted(ev: dict, cls: int, stretch: bool, steps: set[int]) -> dict[str, tuple[int, Any]]:
    """Keys to substitute in this event -> (namespace, parsed value); one level each."""
    want: dict[str, tuple[int, Any]] = {}
    if cls == REGION:
        if _num(ev.get("ts")):
            want["ts"] = (NS_TS, ev["ts"])
        if ev.get("ph") in ("s", "t", "f") and type(ev.get("id")) is int:
            want["id"] = (NS_IDS, ev["id"])
        m = STEP_RE.fullmatch(str(ev.get("name", "")))
        if m and int(m.group(1)) in steps:
            want["name"] = (NS_STEP, ev["name"])
        args = ev.get("args")
        if isinstance(args, dict):
            for k, ns in ID_ARG_KEYS.items():
                if type(args.get(k)) is int:
                    want[k] = (ns, args[k])
    elif cls == EPILOGUE and _num(ev.get("ts")):
        want["ts"] = (NS_TS, ev["ts"])
    if stretch:
        want["dur"] = (NS_DUR, ev["dur"])
    return want


def _split_token(tok: str, ns: int) -> tuple[int, str, str] | None:
    """(integer to offset, text before it, text after it) for one value token; None if unusable."""
    if ns == NS_STEP:  # '"ProfilerStep#12"'
        m = re.fullmatch(r'"ProfilerStep#(\d+)"', tok)
        return (int(m.group(1)), '"ProfilerStep#', '"') if m else None
    m = re.fullmatch(r"(\d+)(\.\d+)?", tok)  # non-negative, no exponent
    if not m:
        return None
    return int(m.group(1)), "", m.group(2) or ""


def _template_from_text(text: str, want: dict[str, tuple[int, Any]]) -> Template | None:
    """Holes at the wanted keys of an event's own text, or None when they cannot be found safely."""
    found: dict[str, re.Match] = {}
    for m in _FIELD_RE.finditer(text):
        k = m.group(1)
        if k in want:
            if k in found:  # same key at two nesting levels: ambiguous
                return None
            found[k] = m
    if set(found) != set(want):
        return None
    pieces: list[str] = []
    fields: list[tuple[int, int]] = []
    pos = 0
    for k, m in sorted(found.items(), key=lambda kv: kv[1].start(2)):
        ns, value = want[k]
        tok = m.group(2)
        try:
            if json.loads(tok) != value:
                return None
        except ValueError:
            return None
        split = _split_token(tok, ns)
        if split is None:
            return None
        base, before, after = split
        pieces.append(_esc(text[pos : m.start(2)] + before) + "{}")
        fields.append((ns, base))
        pos = m.end(2) - len(after)
    pieces.append(_esc(text[pos:]))
    return Template("".join(pieces), tuple(fields))


_LINE1 = ("ph", "cat", "name", "pid", "tid")
_LINE2 = ("ts", "dur")


def kineto_layout(ev: dict) -> str:
    """An event laid out the way Kineto writes it (used for sources in another layout)."""
    d = json.dumps
    l1 = [k for k in _LINE1 if k in ev]
    l2 = [k for k in _LINE2 if k in ev] + [k for k in ev if k not in _LINE1 and k not in _LINE2 and k != "args"]
    lines = ["{"]
    body = [", ".join(f"{d(k)}: {d(ev[k])}" for k in l1), ", ".join(f"{d(k)}: {d(ev[k])}" for k in l2)]
    body = [b for b in body if b]
    if "args" in ev:
        args = ev["args"]
        if isinstance(args, dict) and args:
            inner = ",\n".join(f"      {d(k)}: {d(v)}" for k, v in args.items())
            body.append(f'"args": {{\n{inner}\n    }}')
        else:
            body.append(f'"args": {d(args)}')
    lines.append(",\n".join("    " + b for b in body))
    lines.append("  }")
    return "\n".join(lines)


@dataclass
class Layout:
    """Everything needed to write the scaled trace, independent of the number of copies."""

    # Output items in order: ("text", str) written as is; ("prologue", Template) written once with
    # its duration stretched; ("epilogue", Template) written once behind the last copy;
    # ("region", [Template, ...]) a run written k times.
    items: list[tuple[str, Any]]
    plan: Plan
    fixed_bytes: int
    copy_bytes: int
    copy_events: int
    relaid: int  # events whose own bytes could not be templated, so they were re-laid out
    kineto_like: bool  # False: the source is not in Kineto's layout and every event was re-laid out


def region_blocks(src: Source, plan: Plan) -> list[int]:
    """Block number of every event (-1 outside the region): the source's time-sorted stretches.

    Kineto writes its events as a few long stretches, each sorted by time (host ops of all steps,
    then runtime calls, then device activities with their flow ends, ...). A block starts where the
    region's timestamps jump back by more than half the region's span. Writing each block's k
    copies one after the other keeps every stretch sorted, as in a k-times longer capture; local
    disorder inside a block (flow ends, nesting) is kept as the source has it.
    """
    blocks = [-1] * len(src.events)
    block, top = -1, None
    for i, ev in enumerate(src.events):
        if plan.classes[i] != REGION:
            continue
        ts = ev.get("ts")
        if _num(ts):
            if top is None or ts < top - plan.span_us / 2:
                block, top = block + 1, ts
            top = max(top, ts)
        blocks[i] = max(block, 0)
    return blocks


def build_layout(src: Source, plan: Plan) -> Layout:
    """Turn every event into text or a template, and region events into replicated blocks.

    Events outside the region that sit inside a block in the source (a prologue kernel among the
    first step's kernels, a metadata event) are written before that block's copies, epilogue
    ones after them; events between blocks stay where they are.
    """
    steps = set(plan.steps)
    kineto_like = sum("\n" in c for c in src.chunks[:200]) > len(src.chunks[:200]) // 2
    blocks = region_blocks(src, plan)
    # for each event, the block of the nearest region event before and after it
    prev_block, nxt_block = [-1] * len(blocks), [-1] * len(blocks)
    last = -1
    for i, b in enumerate(blocks):
        last = b if b >= 0 else last
        prev_block[i] = last
    last = -1
    for i in range(len(blocks) - 1, -1, -1):
        last = blocks[i] if blocks[i] >= 0 else last
        nxt_block[i] = last

    items: list[tuple[str, Any]] = []
    fixed = copy_b = copy_n = relaid = 0
    block: list[Template] = []
    before: list[tuple[str, Any]] = []
    after: list[tuple[str, Any]] = []

    def flush() -> None:
        nonlocal block, before, after
        items.extend(before)
        if block:
            items.append(("region", block))
        items.extend(after)
        block, before, after = [], [], []

    for i, (ev, chunk) in enumerate(zip(src.events, src.chunks)):
        cls = plan.classes[i]
        text = chunk if kineto_like else kineto_layout(ev)
        want = _wanted(ev, cls, i in plan.stretch, steps)
        tmpl = None
        if want:
            tmpl = _template_from_text(text, want)
            if tmpl is None:  # e.g. a key at two nesting levels: lay the event out ourselves
                relaid += 1
                tmpl = _template_from_text(kineto_layout(ev), want)
                if tmpl is None:
                    raise ValueError(f"{src.path}: cannot template event {i}: {chunk[:200]}")
        if cls == REGION:
            if block and i > 0 and blocks[i] != prev_block[i - 1]:
                flush()
            block.append(tmpl)
            copy_b += len(text) + 4
            copy_n += 1
            continue
        item = ("text", text) if tmpl is None else ("epilogue" if cls == EPILOGUE else "prologue", tmpl)
        if prev_block[i] >= 0 and prev_block[i] == nxt_block[i]:  # inside a block
            (after if cls == EPILOGUE else before).append(item)
        else:
            flush()
            items.append(item)
        fixed += len(text) + 4
    flush()
    fixed += sum(len(raw) for k, raw, _ in src.top if k != "traceEvents") + 1024
    return Layout(items, plan, fixed, copy_b, copy_n, relaid, kineto_like)


# --------------------------------------------------------------------------------------------
# Writing


def _offsets(plan: Plan, j: int, k: int) -> list[int]:
    off = [0] * 6
    for ns in (NS_TS, NS_IDS, NS_STEP, NS_SEQNO, NS_SEQ):
        off[ns] = j * plan.ranges.get(ns, 0)
    off[NS_DUR] = (k - 1) * plan.span_us
    return off


def render_events(layout: Layout, k: int) -> Iterator[str]:
    """Event texts in output order (each without separator)."""
    plan = layout.plan
    once = _offsets(plan, 0, k)  # ids as in the source, spanning durations stretched
    epilogue = list(once)
    epilogue[NS_TS] = (k - 1) * plan.span_us
    for kind, obj in layout.items:
        if kind == "text":
            yield obj
        elif kind == "region":
            for j in range(k):
                off = _offsets(plan, j, k)
                for t in obj:
                    yield t.fmt.format(*[b + off[ns] for ns, b in t.fields])
        else:
            off = epilogue if kind == "epilogue" else once
            yield obj.fmt.format(*[b + off[ns] for ns, b in obj.fields])


def _distributed_info(base: Any, rank: int, nranks: int) -> dict | None:
    """The source's distributedInfo for one rank file of an ``nranks`` folder."""
    if nranks == 1:
        return base if isinstance(base, dict) else None
    info = dict(base) if isinstance(base, dict) else {}
    old_ws = info.get("world_size")
    info["rank"] = rank
    info["world_size"] = nranks
    if isinstance(info.get("pg_config"), list) and isinstance(old_ws, int):
        pgs = []
        for pg in info["pg_config"]:
            if isinstance(pg, dict) and pg.get("ranks") == list(range(old_ws)):
                pg = dict(pg, ranks=list(range(nranks)), pg_size=nranks)
            pgs.append(pg)
        info["pg_config"] = pgs
    return info


def header_and_trailer(src: Source, meta: dict, dist: dict | None) -> tuple[str, str]:
    """Top-level text before and after the events: the source's values verbatim, ours added."""
    keys = [k for k, _, _ in src.top]
    ev_at = keys.index("traceEvents")
    before, after = [], []
    have_dist = "distributedInfo" in keys
    for idx, (k, raw, val) in enumerate(src.top):
        if k in ("traceEvents", "traceinspect_scaled"):
            continue
        if k == "distributedInfo":
            if dist is None:
                continue
            raw = json.dumps(dist)
        (before if idx < ev_at or k == "distributedInfo" else after).append(f"  {json.dumps(k)}: {raw}")
    if not have_dist and dist is not None:
        before.append(f'  "distributedInfo": {json.dumps(dist)}')
    before.append(f'  "traceinspect_scaled": {json.dumps(meta)}')
    head = "{\n" + "".join(b + ",\n" for b in before) + '  "traceEvents": [\n'
    tail = "\n  ]" + "".join(",\n" + a for a in after) + "\n}"
    return head, tail


class _Writer:
    """Buffers text and writes it in ~8 MB encoded chunks (bounded memory, few syscalls)."""

    def __init__(self, fh):
        self.fh, self.buf, self.n, self.bytes = fh, [], 0, 0

    def write(self, s: str) -> None:
        self.buf.append(s)
        self.n += len(s)
        if self.n >= 8 << 20:
            self.flush()

    def flush(self) -> None:
        if self.buf:
            data = "".join(self.buf).encode("utf-8")
            self.fh.write(data)
            self.bytes += len(data)
            self.buf, self.n = [], 0


def write_body(layout: Layout, k: int, fh) -> tuple[int, int]:
    """Events (Kineto layout, ``  {`` ... ``  },``) to fh; returns (bytes, events)."""
    w = _Writer(fh)
    n = 0
    first = True
    for text in render_events(layout, k):
        w.write("  " + text if first else ",\n  " + text)
        first = False
        n += 1
    w.flush()
    return w.bytes, n


def _open_out(path: Path, gz: bool, level: int):
    return gzip.open(path, "wb", compresslevel=level) if gz else open(path, "wb")


@dataclass
class ScaleResult:
    files: list[str]
    factor: int
    events_per_file: int
    steps_per_file: int
    json_bytes_per_file: int
    file_bytes: list[int] = field(default_factory=list)
    seconds: float = 0.0
    span_us: int = 0
    relaid_events: int = 0


def choose_factor(layout: Layout, target_bytes: int) -> int:
    """Smallest k whose output reaches the target size (at least 1)."""
    return max(1, math.ceil((target_bytes - layout.fixed_bytes) / max(1, layout.copy_bytes)))


def _write_ranks(src, layout, k, meta, dist_base, out, ext, ranks, gz, compresslevel, prefix, body_tmp, log):
    """Write the rank files. Their events are identical: for several ranks they are rendered once
    into ``body_tmp`` and copied behind each rank's own header."""
    files: list[str] = []
    events = body_bytes = 0
    for r in range(ranks):
        dist = _distributed_info(dist_base, r, ranks)
        head, tail = header_and_trailer(src, meta, dist)
        rank_of_file = dist.get("rank", r) if isinstance(dist, dict) else r
        path = out / f"{prefix}{rank_of_file}{ext}"
        with _open_out(path, gz, compresslevel) as fh:
            fh.write(head.encode())
            if ranks == 1:
                body_bytes, events = write_body(layout, k, fh)
            else:
                if r == 0:
                    with open(body_tmp, "wb") as bf:
                        body_bytes, events = write_body(layout, k, bf)
                with open(body_tmp, "rb") as bf:
                    shutil.copyfileobj(bf, fh, 16 << 20)
            fh.write(tail.encode())
        files.append(str(path))
        if log:
            log(f"  wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")
    return files, events, body_bytes


def scale(
    source: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    target_mb: float | None = None,
    factor: int | None = None,
    ranks: int = 1,
    gz: bool = False,
    compresslevel: int = 6,
    prefix: str = "rank",
    log=None,
) -> ScaleResult:
    """Write ``ranks`` scaled copies of ``source`` into ``out_dir``; see the module docstring."""
    t0 = time.perf_counter()
    src = load_source(source)
    plan = plan_copies(src)
    layout = build_layout(src, plan)
    if factor is None:
        if target_mb is None:
            raise ValueError("give target_mb or factor")
        factor = choose_factor(layout, int(target_mb * 1e6))
    k = factor
    if log:
        log(
            f"{source}: {len(src.events)} events, {len(plan.steps)} steps, region {layout.copy_events} events"
            f" ({layout.copy_bytes / 1e6:.1f} MB) -> factor {k}, span {plan.span_us} us"
            + (f", {layout.relaid} events re-laid out" if layout.relaid else "")
            + ("" if layout.kineto_like else ", source not in Kineto's layout: all events re-laid out")
        )
    src.events, src.chunks = [], []  # only the templates are needed from here on: free the parsed events
    dist_base = next((v for kk, _, v in src.top if kk == "distributedInfo"), None)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ext = ".pt.trace.json.gz" if gz else ".pt.trace.json"
    n_steps = len(plan.steps) * k
    meta = {
        "source": str(source),
        "factor": k,
        "note": "scaled copy of a real trace for benchmarks; not a real capture",
        "rank_files": ranks,
        "steps": n_steps,
        "scaler_version": SCALER_VERSION,
    }
    body_tmp = out / f".body-{os.getpid()}.tmp"  # the events, rendered once for all rank files
    try:
        files, events, body_bytes = _write_ranks(src, layout, k, meta, dist_base, out, ext, ranks, gz,
                                                 compresslevel, prefix, body_tmp, log)
    finally:
        body_tmp.unlink(missing_ok=True)
    head, tail = header_and_trailer(src, meta, _distributed_info(dist_base, 0, ranks))
    return ScaleResult(
        files=files,
        factor=k,
        events_per_file=events,
        steps_per_file=n_steps,
        json_bytes_per_file=body_bytes + len(head.encode()) + len(tail.encode()),
        file_bytes=[os.path.getsize(f) for f in files],
        seconds=time.perf_counter() - t0,
        span_us=plan.span_us,
        relaid_events=layout.relaid,
    )


def check(path: str | os.PathLike) -> dict[str, Any]:
    """Invariants a scaled file must keep; compare the result with ``check(source)``.

    Counts duplicates where a real capture has none (launch correlations, CPU-op External ids,
    flow-start ids), device activities whose launch is missing or later than the activity, and
    whether the ProfilerStep numbers are consecutive. Loads the whole file (msgspec if present).
    """
    try:
        import msgspec

        doc = msgspec.json.decode(read_text(path))
    except ImportError:
        doc = json.loads(read_text(path))
    evs = doc["traceEvents"]
    steps = sorted(
        int(m.group(1))
        for e in evs
        if e.get("cat") in ("user_annotation", "cpu_op") and (m := STEP_RE.fullmatch(str(e.get("name", ""))))
    )
    launch_ts: dict[Any, float] = {}
    dup_corr = 0
    for e in evs:
        if _is_launcher(e) and "correlation" in (e.get("args") or {}):
            c = e["args"]["correlation"]
            dup_corr += c in launch_ts
            launch_ts[c] = e["ts"]
    orphan = late = 0
    for e in evs:
        c = (e.get("args") or {}).get("correlation")
        if c is not None and not _is_launcher(e) and e.get("ph") == "X":
            if c not in launch_ts:
                orphan += 1
            elif launch_ts[c] > e["ts"]:
                late += 1
    ext = [e["args"]["External id"] for e in evs if e.get("cat") == "cpu_op" and "External id" in (e.get("args") or {})]
    starts = [(e.get("cat"), e.get("id")) for e in evs if e.get("ph") == "s"]
    return {
        "events": len(evs),
        "steps": len(steps),
        "steps_consecutive": steps == list(range(steps[0], steps[0] + len(steps))) if steps else True,
        "dup_launch_correlation": dup_corr,
        "device_events_without_launch": orphan,
        "device_events_before_launch": late,
        "dup_cpu_op_external_id": len(ext) - len(set(ext)),
        "dup_flow_start_id": len(starts) - len(set(starts)),
        "scaled": doc.get("traceinspect_scaled"),
        "distributedInfo": doc.get("distributedInfo"),
    }


def main(argv: Iterable[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("source", help="a real Kineto trace (.json or .json.gz)")
    p.add_argument("--out-dir", required=True, help="folder for the rank files (created)")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--target-mb", type=float, help="size of each rank file as JSON (uncompressed), in MB (1e6 bytes)")
    g.add_argument("--factor", type=int, help="number of copies of the step region instead of a size")
    p.add_argument("--ranks", type=int, default=1, help="number of rank files (an N-rank run)")
    p.add_argument("--gzip", action="store_true", help="write .pt.trace.json.gz")
    p.add_argument("--compresslevel", type=int, default=6)
    p.add_argument("--prefix", default="rank", help="file name prefix (default: rank -> rank3.pt.trace.json)")
    p.add_argument("--verify", action="store_true", help="re-read the outputs and compare invariants with the source")
    a = p.parse_args(argv)
    res = scale(
        a.source,
        a.out_dir,
        target_mb=a.target_mb,
        factor=a.factor,
        ranks=a.ranks,
        gz=a.gzip,
        compresslevel=a.compresslevel,
        prefix=a.prefix,
        log=lambda s: print(s, file=sys.stderr),
    )
    print(json.dumps(res.__dict__, indent=1))
    if a.verify:
        return verify(a.source, res.files)
    return 0


def verify(source: str, files: list[str]) -> int:
    """Print check() of source and outputs; non-zero when an output breaks an invariant the source keeps."""
    ref = check(source)
    bad = 0
    for f in files:
        got = check(f)
        k = (got["scaled"] or {}).get("factor", 1)
        problems = [
            name
            for name in ("dup_launch_correlation", "dup_cpu_op_external_id", "dup_flow_start_id",
                         "device_events_without_launch", "device_events_before_launch")
            if got[name] > ref[name] * k
        ]
        if got["steps"] != ref["steps"] * k or (ref["steps_consecutive"] and not got["steps_consecutive"]):
            problems.append("steps")
        bad += bool(problems)
        print(json.dumps({"file": f, "problems": problems, **{x: got[x] for x in got if x != "scaled"}}), file=sys.stderr)
    print(json.dumps({"source": source, **{x: ref[x] for x in ref if x != "scaled"}}), file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
