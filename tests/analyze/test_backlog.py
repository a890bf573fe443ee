"""GPU work queued before the profiled window (no launch call for it in the file) is labelled as backlog and kept
out of the first step's compute, busy time and wall (real H200 traces of GPU-bound runs)."""

from __future__ import annotations

import statistics

import pytest

from diagnose._real import GPU, PAIRS, raw_files, report, steps_of, union_us
from traceinspect.render.text import render_text


def _backlog(folder):
    """Independent: GPU events whose correlation no runtime call in the file carries, and their union inside the
    first step (from the step's CPU start), with the first step's number."""
    (d,) = raw_files(folder)
    ev = [e for e in d["traceEvents"] if e.get("ph") == "X"]
    calls = {e["args"]["correlation"] for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
             and "correlation" in e.get("args", {})}
    gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    orphans = [e for e in gpu if e["args"].get("correlation") not in calls]
    first = steps_of(ev)[0]
    return int(first["name"].split("#")[1]), orphans, first


@pytest.mark.parametrize("folder", [PAIRS / "big_fp32", GPU / "big_baseline"], ids=lambda p: p.name)
def test_backlog_is_labelled_and_not_counted(folder):
    step, orphans, first = _backlog(folder)
    assert orphans
    d = report(folder)
    steps = {s["step"]: s for s in d["ranks"][0]["steps"]}
    s0 = steps[step]
    # the backlog runs alone at the start of the step: its union is the time only it ran
    a = first["ts"]
    assert s0["backlog_us"] == pytest.approx(union_us([(e["ts"], e["ts"] + e["dur"]) for e in orphans], a, 1e30),
                                             rel=1e-3)
    assert all(s["backlog_us"] == 0 for k, s in steps.items() if k != step)
    # never counted: kernels of the first step are those of every other step, compute and wall are alike
    later = [s for k, s in steps.items() if k != step]
    assert s0["kernel_count"] == statistics.median(s["kernel_count"] for s in later)
    k_orphans = sum(e["dur"] for e in orphans if e.get("cat") == "kernel")
    med_compute = statistics.median(s["compute_kernel_time_us"] for s in later)
    assert abs(s0["compute_kernel_time_us"] - med_compute) < 0.25 * k_orphans + 0.02 * med_compute
    assert sum(s0["breakdown_us"].values()) == pytest.approx(s0["wall_us"], rel=1e-9)
    text = render_text(d, width=160)
    assert f"GPU backlog from before the window (not counted in the step): step {step}" in text


def test_gpu_bound_first_step_not_inflated():
    step, _, _ = _backlog(PAIRS / "big_fp32")
    d = report(PAIRS / "big_fp32")
    walls = {s["step"]: s["wall_us"] for s in d["ranks"][0]["steps"]}
    busy = {s["step"]: s["gpu_busy_us"] for s in d["ranks"][0]["steps"]}
    rest = [w for k, w in walls.items() if k != step]
    assert walls[step] < 1.05 * statistics.median(rest)
    assert busy[step] < 1.05 * statistics.median(b for k, b in busy.items() if k != step)


def test_no_backlog_where_every_launch_is_recorded():
    d = report(PAIRS / "big_clean")
    assert all(s["backlog_us"] == 0 for s in d["ranks"][0]["steps"])


def _running_into_first_step(folder):
    """Independent, from the raw JSON: the first step, the GPU events that started before its CPU start and still
    ran when it began, and the compute kernels the file launches from that step on (its own work)."""
    (d,) = raw_files(folder)
    ev = [e for e in d["traceEvents"] if e.get("ph") == "X"]
    first = steps_of(ev)[0]
    a = first["ts"]
    gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    across = [e for e in gpu if e["ts"] < a < e["ts"] + e["dur"]]
    launched = {e["args"]["correlation"] for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and "correlation" in e.get("args", {}) and e["ts"] >= a}
    own = [e for e in gpu if e.get("cat") == "kernel" and e["args"].get("correlation") in launched
           and "nccl" not in e["name"].lower()]
    return first, across, own


@pytest.mark.parametrize("folder", [PAIRS / "s2_big_fp32", PAIRS / "s3_big_fp32"], ids=lambda p: p.name)
def test_kernel_running_into_first_step_is_backlog(folder):
    """A kernel queued before the window and still running when the first step begins is backlog: its time in
    the step is in ``backlog_us``, not in the step's compute or busy time, and not in ``kernel_count``."""
    first, across, own = _running_into_first_step(folder)
    assert across and all(e.get("cat") == "kernel" for e in across)
    tail = union_us([(e["ts"], e["ts"] + e["dur"]) for e in across], first["ts"], 1e30)
    assert tail > 1000  # a real overlap: milliseconds of a GPU-bound fp32 step
    _, orphans, _ = _backlog(folder)
    steps = sorted(report(folder)["ranks"][0]["steps"], key=lambda s: s["step"])
    s0, later = steps[0], steps[1:]
    assert s0["step"] == int(first["name"].split("#")[1])
    # every GPU event the file holds no launch for, from the step's start on, the running kernel's tail included
    assert s0["backlog_us"] == pytest.approx(union_us([(e["ts"], e["ts"] + e["dur"]) for e in orphans],
                                                      first["ts"], 1e30), rel=1e-3)
    assert s0["backlog_us"] >= tail
    # the step's compute is the union of its own kernels over its window, nothing of the backlog kernel
    shift = first["ts"] - s0["cpu_start_us"]
    mine = union_us([(e["ts"], e["ts"] + e["dur"]) for e in own], s0["start_us"] + shift, s0["end_us"] + shift)
    assert s0["breakdown_us"]["compute"] == pytest.approx(mine, rel=1e-6)
    # and it is as long as every other step's (the backlog tail would add milliseconds)
    med = statistics.median(s["breakdown_us"]["compute"] for s in later)
    assert abs(s0["breakdown_us"]["compute"] - med) < 0.1 * tail
    assert s0["kernel_count"] == statistics.median(s["kernel_count"] for s in later)
    assert s0["gpu_busy_us"] < statistics.median(s["gpu_busy_us"] for s in later) + 0.1 * tail
    assert sum(s0["breakdown_us"].values()) == pytest.approx(s0["wall_us"], rel=1e-9)
