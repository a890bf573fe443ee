"""exposed-comm on real traces: the exposed time per step against an independent recomputation on the public NCCL
traces and its threshold, the waiting for a straggler subtracted on a gloo capture, the bucket advice follows the
bucket count seen, CPU runs get no GPU advice, and an exposed time that is not the gradient tail is not blamed on the
buckets."""

from __future__ import annotations

import re

import numpy as np
import pytest

from traceinspect.config import Config
from traceinspect.diagnose import exposed_comm
from traceinspect.load.reader import load
from traceinspect.run.stages import analyze

from _real import findings, raw_files, report, steps_of
from comm_captures import findings_of, profiler_steps, x_events
from public_traces import DDP_2RANK, DIFF_CONTROL, need, only_file, raw_events
from reference import union_us

NOCACHE = Config(use_cache=False, workers=1)


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


def _reference_step_windows(raw):
    """The documented step window (docs/metrics.md): start_N = max(cpu_start_N, end_{N-1}), end_N = max(cpu_end_N,
    end of the GPU work launched in step N)."""
    ev = x_events(raw)
    steps = profiler_steps(raw)
    launch = {}
    for e in ev:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            for i, s in enumerate(steps):
                if s["ts"] <= e["ts"] < s["ts"] + s["dur"]:
                    launch[e["args"]["correlation"]] = i
    gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    out, prev = [], None
    for i, s in enumerate(steps):
        mine = [g for g in gpu if launch.get(g["args"].get("correlation")) == i]
        start = s["ts"] if prev is None else max(s["ts"], prev)
        end = max([s["ts"] + s["dur"]] + [g["ts"] + g["dur"] for g in mine])
        out.append((start, end))
        prev = end
    return out, gpu


def _exposed_reference(raw):
    """Per step: NCCL kernel time during which no compute kernel runs, within the step window."""
    windows, gpu = _reference_step_windows(raw)
    out = []
    for a, b in windows:
        clip = lambda e: (max(a, e["ts"]), min(b, e["ts"] + e["dur"]))  # noqa: E731
        comm = [clip(e) for e in gpu if e["cat"] == "kernel" and "nccl" in e["name"].lower()]
        comp = [clip(e) for e in gpu if e["cat"] == "kernel" and "nccl" not in e["name"].lower()]
        comm = [(x, y) for x, y in comm if y > x]
        comp = [(x, y) for x, y in comp if y > x]
        both = union_us(comm + comp)
        out.append((both - union_us(comp), b - a))
    return out


def test_exposed_comm_public_trace_threshold_and_evidence():
    f = only_file(need(DIFF_CONTROL))
    raw = raw_events(f)
    ref = _exposed_reference(raw)
    share = np.mean([x / w for x, w in ref])
    rep = analyze(load(f, NOCACHE), NOCACHE)
    ra = rep.ranks[0]
    assert ra.steps["comm_exposed_us"].tolist() == pytest.approx([x for x, _ in ref], abs=0.5)
    # the single-rank trace has no cross-rank waiting to subtract
    fs = findings_of(rep, "exposed-comm")
    if share >= NOCACHE.comm_exposed_share_warning:
        (fd,) = fs
        e = fd.evidence["per_rank"][0]
        assert e["share_of_step"] == pytest.approx(share, rel=1e-3)
        assert e["waiting_for_other_ranks_us_per_step"] == 0.0
        assert "straggler" in fd.evidence["note"]  # rank 3 of 8 alone: waiting cannot be separated
    else:
        assert not fs
    # decision boundary: just above / below the measured share
    assert exposed_comm.RULE.check(rep, NOCACHE.with_overrides(comm_exposed_share_warning=share * 0.99))
    assert not exposed_comm.RULE.check(rep, NOCACHE.with_overrides(comm_exposed_share_warning=share * 1.01))


def test_exposed_comm_on_hta_ddp_is_below_threshold_with_its_tail():
    f = only_file(need(DDP_2RANK))
    raw = raw_events(f)
    ref = _exposed_reference(raw)
    share = np.mean([x / w for x, w in ref])
    assert share < 0.10
    rep = analyze(load(f, NOCACHE), NOCACHE)
    assert not findings_of(rep, "exposed-comm")
    (fd,) = exposed_comm.RULE.check(rep, NOCACHE.with_overrides(comm_exposed_share_warning=share * 0.99))
    e = fd.evidence["per_rank"][0]
    assert e["tail_us_per_step"] == pytest.approx(float(np.mean(rep.ranks[0].steps["comm_tail_us"])))
    assert 0 < e["tail_us_per_step"] < e["exposed_comm_us_per_step"]


@pytest.mark.timing
def test_exposed_comm_subtracts_waiting_for_the_straggler(comm_report):
    rep = comm_report("slow_rank_2")
    waits = {(w["rank"], w["step"]): w["wait_us"] for w in rep.cross_rank["wait"]}
    ra0 = next(r for r in rep.ranks if r.rank == 0)
    cfg = NOCACHE.with_overrides(comm_exposed_share_warning=0.0)
    (fd,) = exposed_comm.RULE.check(rep, cfg)
    e = next(x for x in fd.evidence["per_rank"] if x["rank"] == 0)
    w = np.array([waits[(0, int(s))] for s in ra0.steps["step"]])
    assert e["waiting_for_other_ranks_us_per_step"] == pytest.approx(float(w.mean()))
    # the fast rank's exposed "communication" is mostly waiting for rank 1
    assert e["waiting_for_other_ranks_us_per_step"] > 0.5 * e["exposed_comm_us_per_step"]
    assert e["comm_cost_us_per_step"] == pytest.approx(
        float(np.mean(np.maximum(0, ra0.steps["comm_exposed_us"].to_numpy() - w))))
