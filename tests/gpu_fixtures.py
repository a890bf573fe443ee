"""GPU fixtures under fixtures/, found by the capture metadata every traceinspect capture writes (the top-level
"traceinspect" key), and a cached analysis of a folder: shared by the precision, utilization and rule tests."""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path

import pytest

from traceinspect.config import Config

from analyses import stages_of
from public_traces import raw_events

NOCACHE = Config(use_cache=False, workers=1)
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def report(folder: Path):
    """The live report of a folder, analyzed once per session (analyses.stages_of): read it, do not change it."""
    return stages_of(folder)


@functools.lru_cache(maxsize=4)
def raw_json(path: Path) -> dict:
    """raw_events, parsed once per file for the whole session (tests only read it)."""
    return raw_events(path)


def capture_metadata(path: Path) -> dict:
    """The ``traceinspect`` object of a trace, from the head of the file (it precedes ``traceEvents``)."""
    opener = gzip.open if path.suffix == ".gz" else open
    head = ""
    with opener(path, "rt") as f:
        while '"traceEvents"' not in head and len(head) < (4 << 20):
            block = f.read(1 << 16)
            if not block:
                break
            head += block
    cut = head.find('"traceEvents"')
    try:
        top = json.loads(head[:cut] + '"traceEvents": []}') if cut >= 0 else raw_events(path)
    except ValueError:
        top = raw_events(path)
    return top.get("traceinspect") or {}


@functools.lru_cache(maxsize=None)
def gpu_fixtures() -> tuple[tuple[Path, dict], ...]:
    out = []
    if not FIXTURES.exists():
        return ()
    for folder in sorted({p.parent for p in FIXTURES.rglob("rank*.pt.trace.json*")}):
        first = sorted(folder.glob("rank*.pt.trace.json*"))[0]
        try:
            meta = capture_metadata(first)
        except (OSError, ValueError):
            continue
        if "cuda" in ((meta.get("capture") or {}).get("activities") or []):
            out.append((folder, meta))
    return tuple(out)


def gpu_fixture(record_shapes: bool | None = None, **knobs) -> Path:
    """The first GPU fixture whose workload knobs match (a value may be a predicate), else skip with the reason."""
    def ok(w, k, v):
        return v(w.get(k)) if callable(v) else w.get(k) == v

    for folder, meta in gpu_fixtures():
        w = meta.get("workload") or {}
        shapes = bool((meta.get("capture") or {}).get("record_shapes"))
        if all(ok(w, k, v) for k, v in knobs.items()) and record_shapes in (None, shapes):
            return folder
    want = {k: ("<predicate>" if callable(v) else v) for k, v in knobs.items()}
    if record_shapes is not None:
        want["record_shapes"] = record_shapes
    pytest.skip(f"no GPU fixture with workload {want} under fixtures/ yet (H200 captures, fixtures/README.md)")
