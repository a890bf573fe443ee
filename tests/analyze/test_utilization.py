"""The nvidia-smi view (traceinspect/utilization.py) against an independent recomputation from the raw JSON.

Per window of the grid, plain Python here takes the union of the kernel intervals (NVML's definition: time with at
least one kernel running), the union of non-NCCL kernels (so NCCL-only time = all kernels - compute kernels) and
the union of all GPU activity (so copy-only time = GPU - kernels), and compares. Real traces only: the public ones
in ../shared (skipped when absent), a CPU gloo capture, and the H200 fixtures when they exist.
"""

from __future__ import annotations

from reference import union_us as union_in

import functools
import re
from pathlib import Path

import pytest

from traceinspect.run.stages import analyze
from traceinspect.config import Config
from traceinspect.load.reader import load
from traceinspect.analyze.utilization import FILL_CATEGORIES, summarize

from public_traces import ALL, BERT, DDP_2RANK, DIFF_CONTROL, DIFF_TEST, need, only_file
from gpu_fixtures import gpu_fixture, raw_json
from gpu_fixtures import report as default_report

NOCACHE = Config(use_cache=False, workers=1)


def report(folder: Path, window_us: float = 100_000.0):
    if window_us == 100_000.0:
        return default_report(folder)  # shared with the other test modules
    return _report(folder, window_us)


@functools.lru_cache(maxsize=None)
def _report(folder: Path, window_us: float):
    cfg = NOCACHE.with_overrides(util_window_us=window_us)
    return analyze(load(folder, cfg), cfg)




def raw_intervals(raw: dict):
    ev = [e for e in raw["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    kernels = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "kernel"]
    compute = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "kernel" and "nccl" not in e["name"].lower()]
    gpu = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    steps = sorted((e for e in ev if e.get("cat") == "user_annotation" and re.fullmatch(r"ProfilerStep#\d+", e["name"])),
                   key=lambda e: e["ts"])
    return kernels, compute, gpu, steps


@pytest.mark.parametrize("folder", ALL, ids=lambda p: p.name)
def test_windows_match_an_independent_kernel_union(folder):
    need(folder)
    raw = raw_json(only_file(folder))
    kernels, compute, gpu, steps = raw_intervals(raw)
    ra = report(folder).ranks[0]
    t = ra.tables["utilization"]
    assert len(t)
    # The grid: starts at the first step, 100 ms apart, the last window ends at the last step's end.
    offset = ra.steps["cpu_start_us"].iloc[0] - steps[0]["ts"]  # our clock vs the file's, if shifted
    starts = t["window_start_us"].to_numpy() - offset
    assert starts[0] == pytest.approx(steps[0]["ts"], abs=1e-3)
    assert all(abs((b - a) - 100_000.0) < 1e-3 for a, b in zip(starts[:-1], starts[1:]))
    assert t["window_end_us"].iloc[-1] == pytest.approx(ra.steps["end_us"].iloc[-1], abs=1e-3)
    for row, a in zip(t.itertuples(), starts):
        b = a + (row.window_end_us - row.window_start_us)
        length = b - a
        k = union_in(kernels, a, b)
        assert row.util == pytest.approx(k / length, abs=1e-9)
        assert row.comm_only == pytest.approx((k - union_in(compute, a, b)) / length, abs=1e-9)
        assert row.copy == pytest.approx((union_in(gpu, a, b) - k) / length, abs=1e-9)
        assert row.util + sum(getattr(row, c) for c in FILL_CATEGORIES) == pytest.approx(1.0, abs=1e-9)


def test_step_smi_util_matches_raw():
    """The same definition over each step window (the H100 inference step: 60 tiny kernels, mostly idle)."""
    need(BERT)
    kernels, _, _, _ = raw_intervals(raw_json(only_file(BERT)))
    s = report(BERT).ranks[0].steps.iloc[0]
    assert s["smi_util"] == pytest.approx(union_in(kernels, s["start_us"], s["end_us"]) / s["wall_us"], abs=1e-9)
    assert s["smi_util"] < 0.1


def test_launch_calls_match_raw():
    need(DIFF_TEST)
    ev = raw_json(only_file(DIFF_TEST))["traceEvents"]
    steps = sorted((e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])
    kernel_corr = {e["args"]["correlation"] for e in ev if e.get("cat") == "kernel"}
    s = report(DIFF_TEST).ranks[0].steps
    for (_, row), st in zip(s.iterrows(), steps):
        a, b = st["ts"], st["ts"] + st["dur"]
        calls = [e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver") and a <= e["ts"] < b
                 and (e["name"] == "cudaLaunchKernel" or e["args"].get("correlation") in kernel_corr)]
        assert row["launch_count"] == len(calls)
        assert row["launch_call_us"] == pytest.approx(sum(e["dur"] for e in calls), abs=1e-6)


def test_summary_of_the_ddp_trace():
    """A100 DDP rank: every 100 ms sample below 50 %, filled by launch gaps; NCCL-only time is counted busy."""
    need(DDP_2RANK)
    ra = report(DDP_2RANK).ranks[0]
    t = ra.tables["utilization"]
    s = ra.tables["utilization_summary"].iloc[0]
    full = t[~t["partial"]]
    assert s["windows"] == len(full)
    assert s["min_util"] == pytest.approx(full["util"].min()) and s["max_util"] == pytest.approx(full["util"].max())
    assert s["mean_util"] == pytest.approx(full["util"].mean())  # equal windows: plain mean
    assert s["share_below_50"] == pytest.approx((full["util"] < 0.5).mean())
    assert s["share_below_50"] == 1.0 and s["low_filler"] == "other"
    assert s["mean_comm_only"] > 0.01
    assert s["min_util_any_phase"] <= s["min_util"] and s["max_util_any_phase"] >= s["max_util"]
    assert "below 50 %" in s["text"] and "launch gaps" in s["text"]


def test_busy_runs_have_no_low_windows():
    need(DIFF_TEST)
    s = report(DIFF_TEST).ranks[0].tables["utilization_summary"].iloc[0]
    assert s["mean_util"] > 0.7 and s["share_below_50"] == 0 and s["low_filler"] is None


def test_window_length_is_a_setting():
    need(DIFF_CONTROL)
    t100 = report(DIFF_CONTROL).ranks[0].tables["utilization"]
    t50 = report(DIFF_CONTROL, 50_000.0).ranks[0].tables["utilization"]
    assert len(t50) in (2 * len(t100) - 1, 2 * len(t100))
    # The same busy time, tiled more finely.
    busy = lambda t: float(((t["window_end_us"] - t["window_start_us"]) * t["util"]).sum())  # noqa: E731
    assert busy(t50) == pytest.approx(busy(t100), rel=1e-9)


def test_partial_only_trace_uses_its_one_window():
    """The H100 inference trace is shorter than one sample: its one partial window is the summary."""
    need(BERT)
    ra = report(BERT).ranks[0]
    t = ra.tables["utilization"]
    assert len(t) == 1 and bool(t["partial"].iloc[0])
    s = summarize(t, 100_000.0)
    assert s["partial_windows_used"] and s["windows"] == 1


def test_cpu_trace_has_no_view(cpu_clean_run):
    rep = analyze(load(cpu_clean_run, NOCACHE), NOCACHE)
    assert not rep.errors
    for ra in rep.ranks:
        assert len(ra.tables["utilization"]) == 0 and len(ra.tables["utilization_summary"]) == 0
        assert ra.steps["smi_util"].isna().all() and (ra.steps["launch_count"] == 0).all()


def test_fixture_slow_loader_fills_low_windows_with_data_waits():
    folder = gpu_fixture(num_workers=0, item_delay_ms=lambda v: bool(v and v > 0))
    for ra in report(folder).ranks:
        s = ra.tables["utilization_summary"].iloc[0]
        assert s["share_below_50"] > 0.5 and s["low_filler"] == "dataloader"
