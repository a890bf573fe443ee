"""Independent measurements of the CPU strategy captures (fixtures/cpu_strategies), from the raw trace JSON with the
standard library only: per rank and step, the ProfilerStep#N duration and the union of the training thread's records
of given names inside it. The pipeline and tensor-parallel tests and the paired table compare traceinspect with
these."""

from __future__ import annotations

import gzip
import json
import math
import statistics
from functools import lru_cache
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cpu_strategies"

P2P = frozenset({"c10d::send", "c10d::recv_", "gloo:send", "gloo:recv"})
P2P_ISSUE = frozenset({"c10d::send", "c10d::recv_"})
TP_OPS = frozenset({"_c10d_functional::all_reduce", "_c10d_functional::all_gather_into_tensor",
                    "_c10d_functional::reduce_scatter_tensor", "_c10d_functional::wait_tensor"})
TP_COUNTED = TP_OPS - {"_c10d_functional::wait_tensor"}


def capture_extra(name: str) -> dict:
    """What the capture script ran (``traceinspect.extra`` of the fixture's first trace): never read by the analysis."""
    with gzip.open(sorted((FIXTURES / name).glob("rank*.pt.trace.json.gz"))[0], "rt") as fh:
        return json.load(fh)["traceinspect"]["extra"]


def union(intervals, a: float, b: float) -> float:
    """Length of the union of ``intervals`` clipped to [a, b]."""
    total, end = 0.0, a
    for s, e in sorted((max(s, a), min(e, b)) for s, e in intervals):
        if e <= s:
            continue
        total += e - max(s, end) if e > end else 0.0
        end = max(end, e)
    return total


def windows(name: str):
    """Per trace file (window) of the fixture: (rank, its complete events, its ProfilerStep#N annotations, the
    training thread's tid)."""
    for f in sorted((FIXTURES / name).glob("rank*.pt.trace.json.gz")):
        with gzip.open(f, "rt") as fh:
            d = json.load(fh)
        ev = [e for e in d["traceEvents"] if e.get("ph") == "X"]
        steps = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
        yield d["distributedInfo"]["rank"], ev, steps, steps[0]["tid"]


@lru_cache(maxsize=None)
def per_step(name: str, names: frozenset, counted: frozenset = frozenset()) -> dict:
    """(rank, step) -> (step us, union us of the training thread's records named ``names`` inside the step, number
    of ``counted`` records starting in it), over every trace file (window) of the fixture."""
    out = {}
    for rank, ev, steps, tid in windows(name):
        mine = [e for e in ev if e.get("tid") == tid and e.get("name") in names
                and e.get("cat") in ("cpu_op", "user_annotation")]
        iv = [(e["ts"], e["ts"] + e["dur"]) for e in mine]
        for s in steps:
            a, b = s["ts"], s["ts"] + s["dur"]
            n = sum(1 for e in mine if e["name"] in counted and a <= e["ts"] < b)
            out[(rank, int(s["name"].split("#")[1]))] = (float(s["dur"]), union(iv, a, b), n)
    return out


def step_means(name: str, field: int, names: frozenset = P2P) -> list[float]:
    """Per step, the mean over ranks of ``field`` (0: step us, 1: the union of ``names``); steps every rank has."""
    d = per_step(name, names)
    ranks = {r for r, _ in d}
    steps = sorted({s for _, s in d if all((r, s) in d for r in ranks)})
    return [statistics.fmean(d[(r, s)][field] for r in ranks) for s in steps]


def saving(problem: str, twin: str, field: int, names: frozenset = P2P) -> dict:
    """Mean of ``field`` per step in ``problem`` less in ``twin``, its noise (twice the standard error of the
    difference: the pairs alternate their windows within one job, so the load both saw is the same) and the
    tolerance a claim is held to: max(30 % of the saving, the noise)."""
    a, b = step_means(problem, field, names), step_means(twin, field, names)
    se = math.hypot(statistics.stdev(a) / math.sqrt(len(a)), statistics.stdev(b) / math.sqrt(len(b)))
    s = statistics.fmean(a) - statistics.fmean(b)
    return {"saving_us": s, "noise_us": 2 * se, "tolerance_us": max(0.3 * abs(s), 2 * se)}
