"""exposed-comm on real traces: the bucket advice follows the bucket count seen, CPU runs get no GPU advice, and an
exposed time that is not the gradient tail is not blamed on the buckets."""

from __future__ import annotations

import re

import pytest

from _real import findings, raw_files, report, steps_of
from public_traces import DIFF_CONTROL, need


def _grad_allreduces_per_pass(folder) -> set:
    """Independent: per rank file, gradient all-reduce issue ops (c10d::allreduce_) per backward pass
    (one Optimizer.step per step), counted in the raw events of each step."""
    counts = set()
    for d in raw_files(folder):
        ev = d["traceEvents"]
        for s in steps_of(ev):
            a, b = s["ts"], s["ts"] + s["dur"]
            ar = [e for e in ev if e.get("ph") == "X" and e["name"] == "c10d::allreduce_" and a <= e["ts"] < b]
            opt = [e for e in ev if e.get("ph") == "X" and e["name"].startswith("Optimizer.step#") and a <= e["ts"] < b]
            counts.add((len(ar), len(opt)))
    return counts


@pytest.mark.timing
def test_one_bucket_per_round_gets_smaller_buckets_not_bigger(cpu_baseline_run):
    f = findings(cpu_baseline_run)["exposed-comm"]
    per = f["evidence"]["per_rank"][0]
    # The baseline accumulates over 4 micro-batches without no_sync: 4 all-reduces and one optimizer step per step,
    # so one bucket per round.
    assert _grad_allreduces_per_pass(cpu_baseline_run) == {(4, 1)}
    assert per["buckets_per_round"] == 1
    assert "fewer, bigger" not in f["fix"] and "bucket_cap_mb=50" not in f["fix"]
    assert "Smaller buckets" in f["fix"]
    # a CPU / gloo run: no GPU advice
    assert "device_ids" not in f["fix"].replace("no device_ids", "")


def test_exposed_time_outside_the_gradient_tail_names_the_collectives():
    need(DIFF_CONTROL)
    f = findings(DIFF_CONTROL)["exposed-comm"]
    per = f["evidence"]["per_rank"][0]
    assert per["tails_all_rounds_us_per_step"] < 0.5 * per["comm_cost_us_per_step"]
    top = next(iter(per["comm_time_by_collective_us_per_step"]))
    assert top == "all_to_all" and "all_to_all" in f["fix"]
    assert "bucket_cap_mb" not in f["fix"]


@pytest.mark.timing
def test_exposed_comm_time_by_collective_is_the_gloo_work(cpu_baseline_run):
    d = report(cpu_baseline_run)
    f = next(x for x in d["findings"] if x["id"] == "exposed-comm")
    per = f["evidence"]["per_rank"][0]
    assert re.search(rf"rank {per['rank']}\)", f["title"])
    # independent: the gloo worker's all_reduce annotations that start inside the rank's steps, per step
    raw = next(r for r in raw_files(cpu_baseline_run) if r["distributedInfo"]["rank"] == per["rank"])
    ev = [e for e in raw["traceEvents"] if e.get("ph") == "X"]
    steps = steps_of(ev)
    work = [e["dur"] for e in ev if e["name"] == "gloo:all_reduce"
            and any(s["ts"] <= e["ts"] < s["ts"] + s["dur"] for s in steps)]
    assert per["comm_time_by_collective_us_per_step"] == {
        "gradient allreduce": pytest.approx(sum(work) / len(steps), rel=1e-6)}
