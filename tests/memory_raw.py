"""The allocator's ``[memory]`` events of a raw trace, read with the standard library: the independent reference the
memory analysis and the memory rules are checked against."""

from __future__ import annotations

import gzip
import json
from pathlib import Path


def raw_doc(folder: Path) -> dict:
    (path,) = sorted(folder.glob("*.json*"))
    with gzip.open(path, "rt") as f:
        return json.load(f)


def mem_events(doc: dict, device_types) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "i" and e.get("name") == "[memory]"
            and e["args"].get("Device Type") in device_types]


def independent_steps(doc: dict, device_types) -> dict[int, dict]:
    """Per ProfilerStep: start/peak/end allocated and peak reserved, from the raw events alone."""
    mem = sorted(mem_events(doc, device_types), key=lambda e: e["ts"])
    base = doc.get("baseTimeNanoseconds")  # not needed: steps and memory share the trace's clock
    del base
    out = {}
    for s in doc["traceEvents"]:
        name = str(s.get("name", ""))
        if s.get("ph") != "X" or not name.startswith("ProfilerStep#") or s.get("cat") == "gpu_user_annotation":
            continue
        inside = [e for e in mem if s["ts"] <= e["ts"] < s["ts"] + s["dur"]]
        if not inside:
            continue
        before = [e for e in mem if e["ts"] < s["ts"]]
        first = inside[0]["args"]
        out[int(name.split("#")[1])] = {
            "start_allocated": first["Total Allocated"] - first["Bytes"],
            "peak_allocated": max(max(e["args"]["Total Allocated"] for e in inside),
                                  first["Total Allocated"] - first["Bytes"]),
            "peak_reserved": max([e["args"]["Total Reserved"] for e in inside]
                                 + ([before[-1]["args"]["Total Reserved"]] if before else [])),
            "end_allocated": inside[-1]["args"]["Total Allocated"],
        }
    return out
