"""Exposed communication per kind (``comm_by_kind[].exposed_us``) on the real FSDP2 CPU captures of
fixtures/cpu_strategies, against an independent computation from the raw trace JSON done here with the standard
library: each collective's wait window (issue op start to the end of its gloo work), less the training thread's
leaf ops outside collective ops, charged to the earliest-issued collective in flight (docs/communication.md)."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from functools import lru_cache
from pathlib import Path

import pytest

from traceinspect.config import Config
from traceinspect.run.api import analyze_path
from analyses import doc_of

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "cpu_strategies"
FSDP = ("fsdp2_2", "fsdp2_4", "fsdp2_noreshard", "fsdp2_prefetch")
# FSDP2 on gloo: the issuing op of each kind and the gloo work that runs it (reduce-scatter as an all-reduce).
ISSUE = {"c10d::_allgather_base_": ("allgather", "gloo:all_gather"),
         "c10d::_reduce_scatter_base_": ("reduce_scatter", "gloo:all_reduce")}
COMM = ("gloo:", "c10d::", "record_param_comms")


@lru_cache(maxsize=None)
def _doc(name: str) -> dict:
    return doc_of(FIXTURES / name)


def _uncovered(a: float, b: float, busy: list[tuple[float, float]]) -> float:
    """Length of [a, b) outside the busy intervals (disjoint, sorted)."""
    free = max(b - a, 0.0)
    for s, e in busy:
        free -= max(0.0, min(e, b) - max(s, a))
    return free


def _union(iv: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _reference(path: Path) -> tuple[int, dict]:
    """rank, {(step, kind): exposed us} from one rank's trace JSON."""
    with gzip.open(path, "rt") as fh:
        d = json.load(fh)
    ev = [e for e in d["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in ev if e["name"].startswith("ProfilerStep#")]
    main = steps[0]["tid"]
    ops = sorted((e for e in ev if e["tid"] == main and e.get("cat") == "cpu_op"), key=lambda e: e["ts"])
    issues = [e for e in ops if e["name"] in ISSUE]
    runs = defaultdict(list)
    for e in sorted(ev, key=lambda e: e["ts"]):
        if e["tid"] != main and e["name"].startswith("gloo:"):
            runs[e["name"]].append(e)
    # Each issue takes the next gloo run of its kind that starts after it (in order).
    windows, taken = [], defaultdict(int)
    for e in issues:
        kind, run_name = ISSUE[e["name"]]
        lst = runs[run_name]
        while taken[run_name] < len(lst) and lst[taken[run_name]]["ts"] < e["ts"] - 1.0:
            taken[run_name] += 1
        g = lst[taken[run_name]]
        taken[run_name] += 1
        windows.append((e["ts"], max(e["ts"] + e["dur"], g["ts"] + g["dur"]), kind))
    comm_ops = [(e["ts"], e["ts"] + e["dur"]) for e in ops if e["name"].startswith(COMM)]
    busy = []
    for i, e in enumerate(ops):
        leaf = i + 1 == len(ops) or ops[i + 1]["ts"] >= e["ts"] + e["dur"]
        if not leaf or e["name"].startswith(COMM) or any(s <= e["ts"] < t for s, t in comm_ops):
            continue
        busy.append((e["ts"], e["ts"] + e["dur"]))
    busy = _union(busy)
    out: dict = defaultdict(float)
    for st in steps:
        lo, hi = st["ts"], st["ts"] + st["dur"]
        reach = float("-inf")
        for s, t, kind in sorted(w for w in windows if lo <= w[0] < hi):
            a, b = max(min(max(s, lo), hi), reach), min(t, hi)
            if b > a:
                out[(int(st["name"].split("#")[1]), kind)] += _uncovered(a, b, busy)
            reach = max(reach, min(t, hi))
    return d["distributedInfo"]["rank"], dict(out)


@pytest.mark.parametrize("name", FSDP)
def test_exposed_per_kind_matches_the_raw_events(name):
    doc = _doc(name)
    ours = {(r["rank"], s["step"], k["name"]): k["exposed_us"] for r in doc["ranks"] for s in r["steps"]
            for k in s.get("comm_by_kind", [])}
    checked = 0
    for f in sorted((FIXTURES / name).glob("rank*.pt.trace.json.gz")):
        rank, ref = _reference(f)
        for (step, kind), us in ref.items():
            got = ours[(rank, step, kind)]
            assert abs(got - us) <= max(0.01 * us, 20.0), (name, rank, step, kind, got, us)
            checked += 1
    assert checked >= 2 * 6 * 2  # two kinds, six steps, every rank


def test_exposed_is_within_each_kinds_wait_and_the_step():
    """Per step the kinds' exposed times add up to no more than the step, and every all-gather step exposes
    some: FSDP2 on gloo waits for each all-gather before the block runs."""
    doc = _doc("fsdp2_2")
    for r in doc["ranks"]:
        for s in r["steps"]:
            total = sum(k["exposed_us"] for k in s["comm_by_kind"])
            assert 0 < total <= s["wall_us"]
            assert next(k for k in s["comm_by_kind"] if k["name"] == "allgather")["exposed_us"] > 0


def test_gpu_kinds_split_the_timelines_exposed_comm():
    """On a public 2-rank NCCL trace the kinds' exposed times add up to the step's comm_exposed_us (the
    timeline's NCCL time with no compute kernel running), step by step."""
    from public_traces import DDP_2RANK, need

    need(DDP_2RANK)
    doc = analyze_path(DDP_2RANK, Config(use_cache=False, workers=1)).to_dict()
    checked = 0
    for r in doc["ranks"]:
        for s in r["steps"]:
            if s.get("comm_by_kind"):
                total = sum(k["exposed_us"] for k in s["comm_by_kind"])
                assert total == pytest.approx(s["comm_exposed_us"], rel=1e-3, abs=1.0), (r["rank"], s["step"])
                checked += 1
    assert checked >= 3


def _charge_one_by_one(ws, we, bs, be):
    """Each window in turn, from where the earlier ones reached: its length less the busy time inside it, summed
    as numpy sums one window's overlaps."""
    import numpy as np

    out, reach = np.zeros(len(ws)), -np.inf
    for i in range(len(ws)):
        a, b = max(ws[i], reach), we[i]
        if b > a:
            lo, hi = np.searchsorted(be, a, "right"), np.searchsorted(bs, b, "left")
            covered = np.clip(np.minimum(be[lo:hi], b) - np.maximum(bs[lo:hi], a), 0, None).sum() if hi > lo else 0.0
            out[i] = (b - a) - covered
        reach = max(reach, we[i])
    return out


@pytest.mark.parametrize("seed", range(20))
def test_windows_charged_at_once_equal_one_by_one(seed):
    """Random windows over random disjoint busy intervals (some windows covering dozens of them, some inside one,
    some overlapping earlier windows): the vectorized charge equals the window-by-window one bit for bit."""
    import numpy as np

    from traceinspect.analyze.comm_exposure import charge

    rng = np.random.default_rng(seed)
    edges = np.sort(rng.uniform(0, 1e4, 2 * int(rng.integers(0, 300))))
    bs, be = edges[0::2], edges[1::2]
    n = int(rng.integers(0, 60))
    ws = np.sort(rng.uniform(-100, 1.01e4, n))
    we = ws + rng.choice([0.0, 1.0, 50.0, 2000.0], n) * rng.uniform(0, 1, n)
    got = charge(ws, we, bs, be)
    assert got.tobytes() == _charge_one_by_one(ws, we, bs, be).tobytes()
