#!/usr/bin/env python3
"""The decode floor: the least work any analyzer of these files must do, on one core.

Why: "traceinspect takes 20 s on 1 GB" means little alone; compared with the time it takes just to
read and decode the same bytes into the handful of fields an analysis needs, it says how much of
the time is analysis and how much is unavoidable I/O + JSON. A tool cannot go below this floor
without skipping the JSON decode (for example by reading a cache).

What it does per file, sequentially in one process (one core, no threads): read the bytes,
gunzip if gzip, and ``msgspec.json.decode`` into typed structs that keep only
ph/cat/name/pid/tid/ts/dur and ten argument keys (``correlation``, ``External id``, ``stream``,
``device``, ``bytes``, ``In msg nelems``, ``Out msg nelems``, ``dtype``, ``Group size``,
``Seq``); every other key is skipped by the decoder without building objects. Decoded events are
dropped after each file, so memory is one file's bytes plus its events.

Prints one JSON line: {"files", "events", "bytes", "seconds", "per_file": [...]}.
Usage: python benchmarks/floor.py DIR_OR_FILE [...]
"""

from __future__ import annotations

import gc
import json
import sys
import time
import zlib
from pathlib import Path
from typing import Union

import msgspec

Num = Union[int, float]
Id = Union[int, str]  # pids/tids are ints for processes and strings for "Spans"/"Traces" tracks
# Argument values are kept loosely typed: they are ints in Kineto, but a decode floor must not fail
# on a trace that writes one of them as a string.
Val = Union[int, float, str, None]


class Args(msgspec.Struct, gc=False):
    correlation: Val = None
    external_id: Val = msgspec.field(default=None, name="External id")
    stream: Val = None
    device: Val = None
    bytes: Val = None
    in_msg_nelems: Val = msgspec.field(default=None, name="In msg nelems")
    out_msg_nelems: Val = msgspec.field(default=None, name="Out msg nelems")
    dtype: Val = None
    group_size: Val = msgspec.field(default=None, name="Group size")
    seq: Val = msgspec.field(default=None, name="Seq")


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: Id = 0
    tid: Id = 0
    ts: Num = 0
    dur: Num = 0
    args: Union[Args, None] = None


class Trace(msgspec.Struct, gc=False):
    traceEvents: list[Event] = []


_DECODER = msgspec.json.Decoder(Trace)


def read_bytes(path: Path) -> bytes:
    """File bytes, gunzipped in memory when gzip (multi-member files included)."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        out = []
        while data:
            d = zlib.decompressobj(wbits=31)
            out.append(d.decompress(data))
            data = d.unused_data
        data = b"".join(out)
    return data


def trace_files(paths: list[str]) -> list[Path]:
    """The trace files named, or found (*.json, *.json.gz) in the folders named."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files += sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith((".json", ".json.gz")))
        else:
            files.append(p)
    return files


def decode_floor(paths: list[str]) -> dict:
    gc.disable()  # the structs are gc=False; the collector would only rescan the event list
    per_file = []
    t_all = time.perf_counter()
    events = nbytes = 0
    for f in trace_files(paths):
        t0 = time.perf_counter()
        data = read_bytes(f)
        trace = _DECODER.decode(data)
        n = len(trace.traceEvents)
        per_file.append({"file": str(f), "events": n, "bytes": len(data), "seconds": time.perf_counter() - t0})
        events += n
        nbytes += len(data)
        del trace, data
    return {
        "files": len(per_file),
        "events": events,
        "bytes": nbytes,
        "seconds": time.perf_counter() - t_all,
        "per_file": per_file,
    }


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    print(json.dumps(decode_floor(sys.argv[1:])))
