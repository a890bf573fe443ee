"""The CPU's own issuing work per step (``cpu_issue_us``, analyze/issue.py) against an independent computation
from the raw trace JSON (standard library only) on real H200 fixtures."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from reference import union_us
from traceinspect.config import Config
from traceinspect.run import report_folder
from sweeps import sweep

ROOT = Path(__file__).resolve().parents[2]
SYNC = {"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy", "cudaMemcpy2D",
        "cudaMemcpyToSymbol", "cudaMemcpyFromSymbol", "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize",
        "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize", "hipMemcpy", "hipMemcpyWithStream",
        "hipMemcpy2D", "hipMemcpyDtoH", "hipMemcpyHtoD", "hipCtxSynchronize", "cuMemcpy", "cuMemcpyDtoH",
        "cuMemcpyHtoD", "cuMemcpy2D"}
# A GPU-bound-turned-CPU-bound fp32 transformer (backward on the autograd thread), a pageable loop with blocking
# copies and DataLoader waits, and a GPU-bound big MLP blocked in event syncs.
FIXTURES = ["gpu_setup/tf_fp32", "gpu_setup/small_pageable", "gpu_pairs/big_fp32"]


def _reference(path: Path) -> dict[int, float]:
    """Per ProfilerStep: the union of the issuing threads' CPU ops, annotations and runtime calls in its window,
    less the union of their waits (sync calls, pageable copies' launches, DataLoader fetches)."""
    with gzip.open(path, "rt") as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    cat = lambda e: str(e.get("cat", "")).lower()  # noqa: E731
    corr = lambda e: (e.get("args") or {}).get("correlation")  # noqa: E731
    steps = [e for e in ev if cat(e) == "user_annotation" and re.fullmatch(r"ProfilerStep#\d+", e["name"])]
    gpu = [e for e in ev if cat(e) in ("kernel", "gpu_memcpy", "gpu_memset")]
    launched = {corr(g) for g in gpu}
    pageable = {corr(g) for g in gpu if cat(g) == "gpu_memcpy" and "Pageable" in g["name"]}
    runtime = [e for e in ev if cat(e) in ("cuda_runtime", "cuda_driver")]
    threads = {steps[0]["tid"]} | {r["tid"] for r in runtime if corr(r) is not None and corr(r) >= 0
                                   and corr(r) in launched}
    work = [e for e in ev if e["tid"] in threads and cat(e) in ("cpu_op", "user_annotation", "cuda_runtime",
                                                                "cuda_driver")
            and not e["name"].startswith("ProfilerStep#")]
    waits = [e for e in work if e["name"].startswith("enumerate(DataLoader)") and cat(e) != "cuda_runtime"
             or cat(e) in ("cuda_runtime", "cuda_driver")
             and (re.sub(r"_v\d+$", "", e["name"]) in SYNC or corr(e) in pageable)]
    span = lambda es: [(e["ts"], e["ts"] + e["dur"]) for e in es]  # noqa: E731
    out = {}
    for s in steps:
        a, b = s["ts"], s["ts"] + s["dur"]
        out[int(s["name"].split("#")[1])] = union_us(span(work), a, b) - union_us(span(waits), a, b)
    return out


@pytest.mark.parametrize("name", FIXTURES)
def test_cpu_issue_matches_the_raw_events(name):
    folder = ROOT / "fixtures" / name
    rank = report_folder(folder, Config(workers=1)).to_dict()["ranks"][0]
    ref = _reference(next(folder.glob("*.json.gz")))
    steps = rank["steps"]
    assert steps
    for s in steps:
        assert s["cpu_issue_us"] == pytest.approx(ref[s["step"]], rel=1e-6, abs=0.01), s["step"]
        # the CPU's own work is never more than its step, and never counts its waits
        assert s["cpu_issue_us"] <= s["cpu_step_us"] - s["sync_us"] - s["dataloader_us"] + 1e-3


def test_cpu_issue_is_the_work_not_the_waits():
    """On the GPU-bound big MLP the CPU is blocked in event syncs half the step: its issuing work is far below its
    wall time; on the fp32 transformer the backward's work is on the autograd thread and counts."""
    big = report_folder(ROOT / "fixtures/gpu_pairs/big_fp32", Config(workers=1)).to_dict()["ranks"][0]["steps"]
    assert sum(s["cpu_issue_us"] for s in big) < 0.5 * sum(s["cpu_step_us"] for s in big)
    tf = report_folder(ROOT / "fixtures/gpu_setup/tf_fp32", Config(workers=1)).to_dict()["ranks"][0]["steps"]
    main_only = _main_thread_only(ROOT / "fixtures/gpu_setup/tf_fp32")
    assert sum(s["cpu_issue_us"] for s in tf) > 2 * sum(main_only.values())


def _main_thread_only(folder: Path) -> dict[int, float]:
    with gzip.open(next(folder.glob("*.json.gz")), "rt") as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    tid = steps[0]["tid"]
    mine = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("tid") == tid and e.get("cat") == "cpu_op"]
    return {s["name"]: union_us(mine, s["ts"], s["ts"] + s["dur"]) for s in steps}


@pytest.mark.parametrize("folder", sweep())
def test_every_step_has_its_issuing_work_within_its_cpu_time(folder):
    for rank in report_folder(folder, Config(workers=1)).to_dict()["ranks"]:
        assert not [e for e in rank.get("errors") or [] if "issue" in e]
        for s in rank["steps"]:
            cpu = s.get("cpu_step_us")
            bound = s["wall_us"] if cpu is None else cpu - (s.get("sync_us") or 0.0) - (s.get("dataloader_us") or 0.0)
            assert 0.0 <= s["cpu_issue_us"] <= bound + 1e-3
