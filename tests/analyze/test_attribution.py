"""Per-step attribution on real traces, every number recomputed here from the raw JSON with plain Python."""

from __future__ import annotations

from reference import union_us as union

import re

import pytest

from traceinspect.run.stages import analyze
from traceinspect.config import Config
from traceinspect.load.reader import load

from public_traces import ALL, BERT, DIFF_CONTROL, DIFF_TEST, need, only_file, raw_events

NOCACHE = Config(use_cache=False, workers=1)
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def reference_steps(raw: dict) -> list[dict]:
    """Independent implementation of the documented step window and per-step sums."""
    ev = raw["traceEvents"]
    steps = sorted(
        (e for e in ev if e.get("cat") == "user_annotation" and re.fullmatch(r"ProfilerStep#\d+", e["name"])),
        key=lambda e: e["ts"],
    )
    launch = {}  # correlation -> step index
    for e in ev:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            for i, s in enumerate(steps):
                if s["ts"] <= e["ts"] < s["ts"] + s["dur"]:
                    launch[e["args"]["correlation"]] = i
    gpu = [e for e in ev if e.get("ph") == "X" and e.get("cat") in GPU_CATS]
    windows = []
    prev_end = None
    for i, s in enumerate(steps):
        launched = [g for g in gpu if launch.get(g["args"].get("correlation")) == i]
        start = s["ts"] if prev_end is None else max(s["ts"], prev_end)
        end = max([s["ts"] + s["dur"]] + [g["ts"] + g["dur"] for g in launched])
        prev_end = end
        windows.append((start, end))
    # Backlog: GPU work running in the first step that no step launched, whose launch call the file lacks or holds
    # from before that step began (queued before the window). It is no step's work.
    call_ts = {e["args"]["correlation"]: e["ts"] for e in ev
               if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    s0, e0 = windows[0] if windows else (0, 0)
    backlog = {id(g) for g in gpu if g["args"].get("correlation") not in launch and s0 <= g["ts"] < e0
               and call_ts.get(g["args"].get("correlation"), -float("inf")) < steps[0]["ts"]}
    if not launch:  # a file that links no launch to GPU work cannot tell backlog apart
        backlog = set()


    out = []
    for i, s in enumerate(steps):
        start, end = windows[i]
        # GPU work belongs to the step that launched it; work no step launched, to the window it starts in.
        mine = [g for g in gpu if id(g) not in backlog and (launch.get(g["args"].get("correlation")) == i
                or (g["args"].get("correlation") not in launch and start <= g["ts"] < end))]
        own = [_in_own_window(g, launch, windows) for g in gpu if id(g) not in backlog]
        busy = union(own, start, end)
        only_backlog = (union([(g["ts"], g["ts"] + g["dur"]) for g in gpu], start, end)
                        - union([(g["ts"], g["ts"] + g["dur"]) for g in gpu if id(g) not in backlog], start, end))
        end -= only_backlog  # the wall leaves out the time only the backlog ran
        copies = [g for g in mine if g["cat"] == "gpu_memcpy"]
        out.append(
            {
                "step": int(s["name"].split("#")[1]),
                "wall": end - start,
                "busy": busy,
                "h2d": sum(g["args"]["bytes"] for g in copies if "HtoD" in g["name"]),
                "pageable_h2d": sum(g["args"]["bytes"] for g in copies if "HtoD" in g["name"] and "Pageable" in g["name"]),
                "d2h": sum(g["args"]["bytes"] for g in copies if "DtoH" in g["name"]),
                "kernels": sum(1 for g in mine if g["cat"] == "kernel"),
            }
        )
    return out


def _in_own_window(g, launch, windows):
    """A GPU event's interval as busy time: a copy or memset counts only inside the window of the step that owns
    it (launched it, else the window it starts in); a kernel wherever it runs."""
    s, e = g["ts"], g["ts"] + g["dur"]
    if g["cat"] not in ("gpu_memcpy", "gpu_memset"):
        return s, e
    k = launch.get(g["args"].get("correlation"))
    if k is None:
        k = next((i for i, (a, b) in enumerate(windows) if a <= s < b), None)
    if k is None:
        return s, e
    a, b = windows[k]
    return min(max(s, a), b), max(min(e, b), min(max(s, a), b))


@pytest.mark.slow  # a sweep over every public trace
@pytest.mark.parametrize("folder", ALL, ids=lambda p: p.name)
def test_steps_and_numbers_match_reference(folder):
    need(folder)
    ref = reference_steps(raw_events(only_file(folder)))
    rep = analyze(load(folder, NOCACHE), NOCACHE)
    d = rep.to_dict()
    steps = d["ranks"][0]["steps"]
    assert [s["step"] for s in steps] == [r["step"] for r in ref]  # each ProfilerStep once (GPU copies ignored)
    for s, r in zip(steps, ref):
        assert s["wall_us"] == pytest.approx(r["wall"], abs=1e-3)
        assert s["gpu_busy_us"] == pytest.approx(r["busy"], abs=1e-3)
        assert s["h2d_bytes"] == r["h2d"]
        assert s["pageable_h2d_bytes"] == r["pageable_h2d"]
        assert s["d2h_bytes"] == r["d2h"]
        assert s["kernel_count"] == r["kernels"]


@pytest.mark.parametrize("folder", ALL, ids=lambda p: p.name)
def test_breakdown_adds_up_to_the_step(folder):
    need(folder)
    d = analyze(load(folder, NOCACHE), NOCACHE).to_dict()
    for r in d["ranks"]:
        for s in r["steps"]:
            assert sum(s["breakdown_us"].values()) == pytest.approx(s["wall_us"], abs=1e-6 * s["wall_us"] + 1e-6)
            assert all(v >= -1e-6 for v in s["breakdown_us"].values())
            # GPU busy = everything but idle; each total is at least its exposed part.
            assert s["wall_us"] - s["breakdown_us"]["idle"] == pytest.approx(s["gpu_busy_us"], abs=1e-3)
            for cat, exp in (("comm", "comm_exposed"), ("h2d", "h2d_exposed"), ("compute", "compute")):
                assert s["totals_us"][cat] >= s["breakdown_us"][exp] - 1e-6


def test_bert_counts_its_one_step_once():
    """torch writes ProfilerStep#6 on the CPU and again on the GPU timeline: one step, not two."""
    need(BERT)
    raw = raw_events(only_file(BERT))
    assert sum(1 for e in raw["traceEvents"] if e.get("name") == "ProfilerStep#6") == 2
    d = analyze(load(BERT, NOCACHE), NOCACHE).to_dict()
    assert [s["step"] for s in d["ranks"][0]["steps"]] == [6]
    ids = {f["id"] for f in d["findings"]}
    assert not ids & {"small-buckets", "sync-every-microstep", "straggler", "exposed-comm", "pageable-memcpy"}


def test_pageable_dtoh_blocking_is_host_sync():
    """The A100 control run copies results to pageable memory every step; the CPU waits on each copy."""
    need(DIFF_CONTROL)
    raw = raw_events(only_file(DIFF_CONTROL))
    pageable = [e for e in raw["traceEvents"] if e.get("name") == "Memcpy DtoH (Device -> Pageable)"]
    assert pageable
    d = analyze(load(DIFF_CONTROL, NOCACHE), NOCACHE).to_dict()
    f = {x["id"]: x for x in d["findings"]}
    assert "host-sync" in f
    # Their bytes are below the pageable-memcpy floor (64 KiB per step), so that rule stays quiet.
    assert "pageable-memcpy" not in f
    per_step = sum(e["args"]["bytes"] for e in pageable) / 6
    assert per_step < Config().pageable_min_bytes_per_step


def test_sync_time_matches_raw_runtime_calls():
    need(DIFF_TEST)
    raw = raw_events(only_file(DIFF_TEST))
    ev = raw["traceEvents"]
    steps = sorted((e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])
    pageable_corr = {e["args"]["correlation"] for e in ev if e.get("cat") == "gpu_memcpy" and "Pageable" in e["name"]}
    syncs = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy"}
    d = analyze(load(DIFF_TEST, NOCACHE), NOCACHE).to_dict()
    for s, raw_step in zip(d["ranks"][0]["steps"], steps):
        a, b = raw_step["ts"], raw_step["ts"] + raw_step["dur"]
        calls = [e for e in ev if e.get("cat") == "cuda_runtime" and a <= e["ts"] < b
                 and (e["name"] in syncs or e["args"].get("correlation") in pageable_corr)]
        assert s["sync_count"] == len(calls)
        # Calls on one thread do not overlap, so the union is the sum (clipped to the step).
        assert s["sync_us"] == pytest.approx(sum(min(e["ts"] + e["dur"], b) - e["ts"] for e in calls), abs=1e-3)
