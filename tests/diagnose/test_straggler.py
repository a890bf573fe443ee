"""straggler on real gloo captures (2 and 4 ranks, one rank's loader slowed): the slow rank and its DataLoader are
named, checked against the arrivals at every collective in the raw JSON; a cause is named only when it explains most
of the waiting (the fraction is stated), and a verdict from few matched collectives is marked thin and kept at
warning."""

from __future__ import annotations

import copy
import json
import re

import numpy as np
import pytest

from traceinspect.analyze.cross_rank import cross_rank_analysis
from traceinspect.config import Config
from traceinspect.diagnose import straggler

from _real import findings, raw_files, steps_of, union_us
from comm_captures import INJECTED_DELAY_US, SPECS, findings_of, profiler_steps, raw_of, x_events
from cpu_capture import STRAGGLER_ITEM_DELAY_MS

NOCACHE = Config(use_cache=False, workers=1)

pytestmark = pytest.mark.timing


@pytest.fixture(scope="module")
def slow_rank_run(cpu_capture_factory):
    """Rank 1's in-process loader sleeps per sample; rank 0's does not."""
    return cpu_capture_factory(preset="optimized", overrides={"num_workers": 0, "item_delay_ms": STRAGGLER_ITEM_DELAY_MS,
                                                              "slow_rank": 1})


def _loader_us_per_step(raw: dict) -> float:
    ev = [e for e in raw["traceEvents"] if e.get("ph") == "X"]
    dl = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith("enumerate(DataLoader)")]
    steps = steps_of(ev)
    return sum(union_us(dl, s["ts"], s["ts"] + s["dur"]) for s in steps) / len(steps)


def test_cause_named_with_its_fraction_and_thin_evidence_marked(slow_rank_run):
    raws = {r["distributedInfo"]["rank"]: r for r in raw_files(slow_rank_run)}
    f = findings(slow_rank_run)["straggler"]
    ev = f["evidence"]
    assert ev["rank"] == 1
    # independent: rank 1 waits longer for its batches by this much per step
    diff = _loader_us_per_step(raws[1]) - _loader_us_per_step(raws[0])
    assert ev["largest_difference"]["metric"] == "dataloader_us"
    assert ev["largest_difference"]["difference_us"] == pytest.approx(diff, rel=1e-3)
    share = diff / ev["net_wait_per_step_us"]
    assert ev["cause_explains_share"] == pytest.approx(share, rel=1e-3)
    assert share >= 0.5 and ev["cause"]["metric"] == "dataloader_us"
    assert f"{100 * min(share, 1):.0f} % of the wait" in f["title"]
    # independent: how many all-reduces each rank issued (the matched collectives)
    n = {r: sum(1 for e in raw["traceEvents"] if e.get("name") == "c10d::allreduce_") for r, raw in raws.items()}
    assert ev["matched_collectives"] == min(n.values()) < 10
    assert ev["thin_evidence"] is True and f["severity"] == "warning" and "thin evidence" in f["title"]
    # a CPU-only run: the loader fix without GPU advice
    assert "DataLoader(" in f["fix"] and "pin_memory" not in f["fix"]


def test_a_cause_explaining_little_is_not_named(cpu_baseline_run):
    fs = findings(cpu_baseline_run)
    if "straggler" not in fs:
        pytest.skip("this capture's ranks took turns being last: no straggler to judge")
    f = fs["straggler"]
    ev = f["evidence"]
    big = ev["largest_difference"]
    share = big["difference_us"] / ev["net_wait_per_step_us"] if big else None
    # a difference is steady when its mean is above threshold_noise_se standard errors of itself over the steps
    se = big.get("difference_se_us") if big and ev["steps_with_collectives"] >= 3 else None
    steady = bool(big) and (se is None or big["difference_us"] > ev["threshold_noise_se"] * se)
    if share is not None and share >= 0.5 and steady:
        assert ev["cause"] == big and f"{100 * min(share, 1):.0f} % of the wait" in f["title"]
    else:
        assert ev["cause"] is None
        assert "not visible in the profiled steps" in f["title"]
        assert "DataLoader(" not in f["fix"] and "profile a longer window" in f["fix"]
        if big and not steady:
            assert "is not there step after step" in f["title"]
        elif big:
            assert re.search(rf"explains only {100 * max(share, 0):.0f} %", f["title"])


def _arrivals(folder, ranks):
    """Independent: every gloo work item (gloo:<collective> on a gloo thread), keyed by (step, collective,
    order within the step), per rank on the common clock: (start, end). DDP's single bucket (no_sync) gives one
    all-reduce per step; the second iteration also broadcasts DDP's rebuilt bucket order from rank 0."""
    out = {}
    raws = {r: raw_of(folder, r) for r in ranks}
    base0 = min(raw["baseTimeNanoseconds"] for raw in raws.values())
    for r in ranks:
        raw = raws[r]
        base = (raw["baseTimeNanoseconds"] - base0) / 1000.0  # exact; epoch microseconds would round to 0.25 us
        for s in profiler_steps(raw):
            step = int(s["name"].split("#")[1])
            works = sorted((e for e in x_events(raw) if e["name"].startswith("gloo:") and s["ts"] <= e["ts"] < s["ts"] + s["dur"]),
                           key=lambda e: e["ts"])
            assert sum(e["name"] == "gloo:all_reduce" for e in works) == 1
            seen = {}
            for w in works:
                k = (step, w["name"], seen.setdefault(w["name"], 0))
                seen[w["name"]] += 1
                out.setdefault(k, {})[r] = (base + w["ts"], base + w["ts"] + w["dur"])
    return out


def _union_len(iv):
    total, cur = 0.0, None
    for a, b in sorted(x for x in iv if x[1] > x[0]):
        if cur is None or a > cur[1]:
            total += (cur[1] - cur[0]) if cur else 0.0
            cur = [a, b]
        else:
            cur[1] = max(cur[1], b)
    return total + ((cur[1] - cur[0]) if cur else 0.0)


def _dataloader(folder, r):
    raw = raw_of(folder, r)
    res = []
    for s in profiler_steps(raw):
        res.append(sum(e["dur"] for e in x_events(raw) if e["name"].startswith("enumerate(DataLoader)")
                       and s["ts"] <= e["ts"] < s["ts"] + s["dur"]))
    return float(np.mean(res))


@pytest.mark.parametrize("name,slow", [("slow_rank_2", 1), ("slow_rank_4", 2)])
def test_straggler_names_the_slow_rank_and_its_dataloader(comm_capture, comm_report, name, slow):
    folder = comm_capture(name)
    rep = comm_report(name)
    ranks = list(range(SPECS[name][0]))
    arr = _arrivals(folder, ranks)
    cr = rep.cross_rank
    json.dumps(cr, allow_nan=False)
    assert cr["matched"] == len(arr) and cr["unmatched_count"] == 0 and cr["match_by"] == "order"
    assert len(cr["collectives"]) == len(arr)
    names = {"allreduce": "gloo:all_reduce", "broadcast": "gloo:broadcast"}
    last_of = {}
    for c in cr["collectives"]:
        a = arr[(c["step"], names[c["name"]], c["ordinal"])]
        starts = {r: v[0] for r, v in a.items()}
        last_of[(c["step"], c["name"], c["ordinal"])] = max(starts, key=starts.get)
        assert c["last_rank"] == max(starts, key=starts.get)
        assert c["skew_us"] == pytest.approx(max(starts.values()) - min(starts.values()), abs=1e-3)
        if c["name"] == "allreduce":  # the gradients: the slow rank is late at every one
            assert c["last_rank"] == slow
    # waiting: per rank and step, the union of [own start, min(latest start, own end)] over its collectives
    for w in cr["wait"]:
        iv = []
        for (step, _, _), a in arr.items():
            if step == w["step"]:
                latest = max(v[0] for v in a.values())
                s0, e0 = a[w["rank"]]
                iv.append((s0, min(latest, e0)))
        assert w["wait_us"] == pytest.approx(_union_len(iv), abs=1e-3)
    (f,) = findings_of(rep, "straggler")
    assert f.ranks == [slow]
    ev = f.evidence
    assert ev["matched_collectives"] == len(arr)
    assert ev["last_count"] == sum(r == slow for r in last_of.values())
    assert ev["cause"]["metric"] == "dataloader_us"
    others = [_dataloader(folder, r) for r in ranks if r != slow]
    assert ev["cause"]["late_rank_us"] == pytest.approx(_dataloader(folder, slow), rel=1e-6)
    # per step the median of the others, then the mean over steps; close to the mean of the others' means
    assert ev["cause"]["others_us"] < 0.2 * ev["cause"]["late_rank_us"]
    assert min(others) * 0.5 < ev["cause"]["others_us"] < max(others) * 2
    # 8 items x 12 ms x 4 micro-batches of sleep per step on the slow rank alone
    assert ev["cause"]["difference_us"] > 0.8 * INJECTED_DELAY_US
    assert ev["share_of_step"] >= NOCACHE.straggler_skew_share_warning
    assert "DataLoader" in f.fix and f.severity in ("warning", "critical")


def test_straggler_blames_the_injected_delay_not_the_noise(comm_report):
    """The control: default_sync has no slow rank. Its ranks share two cores (with whatever else runs on the
    machine), so one of them can still be late by tens of ms, and the rule may rightly say so (this is why no
    test asserts a quiet control: under load it is not). What must hold: the waiting in the slow-rank capture
    is the injected loader delay, and the DataLoader difference in the control is not."""
    clean, slow = comm_report("default_sync").cross_rank, comm_report("slow_rank_2").cross_rank
    assert slow["straggler"]["rank"] == 1
    assert slow["straggler"]["caused_wait_per_step_us"] > 0.5 * INJECTED_DELAY_US
    slow_cand = {c["metric"]: c for c in slow["straggler"]["candidates"]}
    assert slow_cand["dataloader_us"]["difference_us"] > 0.8 * INJECTED_DELAY_US
    cand = {c["metric"]: c for c in clean["straggler"]["candidates"]}
    assert abs(cand["dataloader_us"]["difference_us"]) < 0.25 * INJECTED_DELAY_US


def test_straggler_judged_by_the_waiting_it_causes_not_the_count(comm_report):
    """CONSTRUCTED from a real capture: rank 0 made last (by a hair past the latest arrival) at the two
    broadcasts of step 1, as a loaded host's scheduler can make it. Rank 2 is then last at only half of the 4
    matched collectives, below the 60 % a count needs, yet it still causes most of the waiting: the finding
    stands on that share, and each rank's share is its caused wait over the sum of all ranks'."""
    rep = comm_report("slow_rank_4")
    ranks = copy.deepcopy(rep.ranks)
    skew = {(c["step"], c["ordinal"]): c["skew_us"] for c in rep.cross_rank["collectives"] if c["name"] == "broadcast"}
    assert len(skew) == 2
    r0 = next(r for r in ranks if r.rank == 0)
    c = r0.tables["collectives"]
    for i in np.flatnonzero(c["name"].str.contains("broadcast").to_numpy()):
        order = int((c["name"].iloc[:i].str.contains("broadcast") & (c["step"].iloc[:i] == c["step"].iloc[i])).sum())
        c.loc[c.index[i], "ts_us"] += skew[(int(c["step"].iloc[i]), order)] + 1.0
    cr = cross_rank_analysis(ranks, NOCACHE)
    per = {p["rank"]: p for p in cr["per_rank"]}
    assert per[0]["last_count"] == 2 and per[2]["last_count"] == 2
    total = sum(p["caused_wait_per_step_us"] for p in per.values())
    for p in per.values():
        assert p["caused_wait_share"] == pytest.approx(p["caused_wait_per_step_us"] / total, rel=1e-9)
    s = cr["straggler"]
    assert s["rank"] == 2 and s["last_share"] == 0.5 and s["caused_wait_share"] >= NOCACHE.straggler_min_last_share
    edited = copy.copy(rep)
    edited.cross_rank = cr
    (f,) = straggler.check(edited, NOCACHE)
    assert f.ranks == [2] and f.evidence["caused_wait_share"] == s["caused_wait_share"]
    assert f.evidence["cause"]["metric"] == "dataloader_us"
