"""Reports of real and constructed runs, shared by the presentation tests (plots, HTML, TensorBoard, diff):
``analyzed`` (load + analyze once per trace folder, with the one-step timeline table attached the way the per-rank
stage will), ``synthetic_cpu_run`` (tiny CPU-only multi-rank traces written on the spot, labelled as constructed),
``real_cpu_run`` (a session capture of conftest.py, by fixture name) and ``empty_report``."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

import pytest

from traceinspect.analyze.steps import find_steps
from traceinspect.analyze.timeline import step_timeline
from traceinspect.config import Config
from traceinspect.load.reader import load
from traceinspect.run.stages import analyze

NOCACHE = Config(use_cache=False, workers=1)


@functools.lru_cache(maxsize=None)
def _analyzed(folder: str):
    trace = load(folder, NOCACHE)
    rep = analyze(trace, NOCACHE)
    by_rank = {rt.rank: rt for rt in trace.ranks}
    for ra in rep.ranks:
        rt = by_rank[ra.rank]
        ra.tables.setdefault("timeline", step_timeline(rt, find_steps(rt)))
    return trace, rep, rep.to_dict()


def analyzed(folder):
    """(trace, report, report dict) of a folder, cached; ``ra.tables["timeline"]`` filled (median-wall step)."""
    trace, rep, d = _analyzed(str(folder))
    return trace, rep, copy.deepcopy(d)


def synthetic_cpu_run(folder, ranks=(0, 1), world_size=None, steps=3, loader_ms=None) -> Path:
    """Small CPU-only (gloo-like) traces, one file per rank: ProfilerSteps with a DataLoader wait, forward,
    backward, an all-reduce (c10d op + gloo annotation on a second thread) and the optimizer step."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    world_size = world_size or len(ranks)
    for r in ranks:
        lm = (loader_ms or {}).get(r, 1.0 + r)
        ev, t = [], 1000.0

        def put(cat, name, ts, dur, tid=1):
            ev.append({"ph": "X", "cat": cat, "name": name, "pid": 100 + r, "tid": tid, "ts": ts, "dur": dur,
                       "args": {}})

        for k in range(steps):
            wall = 20000.0 + 500 * k
            put("user_annotation", f"ProfilerStep#{k + 1}", t, wall)
            put("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t + 10, lm * 1000)
            f0 = t + 20 + lm * 1000
            put("cpu_op", "aten::linear", f0, 3000)
            put("cpu_op", "autograd::engine::evaluate_function: AddmmBackward0", f0 + 3100, 6000)
            put("cpu_op", "c10d::allreduce_", f0 + 9200, 2000)
            put("user_annotation", "gloo:all_reduce", f0 + 9300, 1800, tid=2)
            put("user_annotation", "Optimizer.step#AdamW.step", f0 + 11400, 1500)
            t += wall + 100
        doc = {"schemaVersion": 1, "distributedInfo": {"backend": "gloo", "rank": r, "world_size": world_size},
               "baseTimeNanoseconds": 1700000000000000000, "traceEvents": ev}
        (folder / f"rank{r}.pt.trace.json").write_text(json.dumps(doc))
    return folder


def real_cpu_run(request, name: str = "cpu_baseline_run") -> Path:
    """A real 2-rank CPU (gloo) capture from tests/conftest.py's session fixtures (``cpu_baseline_run``,
    ``cpu_clean_run``...); skips where those fixtures (or torch) are not there."""
    try:
        return request.getfixturevalue(name)
    except pytest.FixtureLookupError:
        pytest.skip(f"fixture {name} (tests/conftest.py) not available")


def empty_report() -> dict:
    """A report dict with no usable rank at all (every file skipped)."""
    return {"schema": "traceinspect.report/1", "source": "nowhere", "world_size": 2, "ranks_analyzed": 0, "ranks": [],
            "findings": [], "skipped": [{"file": "rank0.json", "reason": "truncated"}], "missing_ranks": [0, 1],
            "cross_rank": {}, "errors": []}
