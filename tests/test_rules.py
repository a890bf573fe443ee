"""The first rules on real traces: each fires on its positive trace with evidence recomputed from the raw JSON,
and stays quiet on the run where the problem was fixed."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from traceinspect.run.stages import analyze
from traceinspect.config import Config
from traceinspect.load.reader import load

GPU = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
CFG = Config(use_cache=False, workers=1)


def report(folder: Path) -> dict:
    return analyze(load(folder, CFG), CFG).to_dict()


def findings(folder: Path) -> dict:
    return {f["id"]: f for f in report(folder)["findings"]}


def raw(folder: Path) -> dict:
    (path,) = sorted(folder.glob("*.json.gz"))
    with gzip.open(path, "rt") as f:
        return json.load(f)


def steps_of(ev: list) -> list[dict]:
    return sorted((e for e in ev if e.get("cat") == "user_annotation" and re.fullmatch(r"ProfilerStep#\d+", e["name"])),
                  key=lambda e: e["ts"])


def launched_in(ev: list, step: dict) -> set:
    a, b = step["ts"], step["ts"] + step["dur"]
    return {e["args"]["correlation"] for e in ev
            if e.get("cat") in ("cuda_runtime", "cuda_driver") and a <= e["ts"] < b and "correlation" in e["args"]}


# ---- pageable-memcpy ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["baseline", "big_baseline"])
def test_pageable_memcpy_fires_with_exact_bytes(name):
    folder = GPU / name
    ev = raw(folder)["traceEvents"]
    f = findings(folder)["pageable-memcpy"]
    per = f["evidence"]["per_rank"][0]
    steps = steps_of(ev)
    per_step = []
    for s in steps:
        corr = launched_in(ev, s)
        per_step.append(sum(e["args"]["bytes"] for e in ev if e.get("cat") == "gpu_memcpy"
                            and e["name"] == "Memcpy HtoD (Pageable -> Device)" and e["args"]["correlation"] in corr))
    assert per_step and all(b > 0 for b in per_step)
    assert per["pageable_h2d_bytes_per_step"] == pytest.approx(sum(per_step) / len(per_step))
    copies = [e for e in ev if e.get("cat") == "gpu_memcpy" and "Pageable" in e["name"]]
    gbps = sum(e["args"]["bytes"] for e in copies) / sum(e["dur"] for e in copies) / 1e3
    assert per["pageable_h2d_gbps"] == pytest.approx(gbps, rel=1e-6)
    assert f["steps"] == [int(s["name"].split("#")[1]) for s in steps]
    assert "pin_memory=True" in f["fix"] and "non_blocking=True" in f["fix"]
    assert per["dataloader_pin_memory"] is False  # the capture's metadata, quoted as evidence


@pytest.mark.parametrize("name", ["pinned", "optimized", "big_optimized"])
def test_pageable_memcpy_quiet_once_pinned(name):
    ev = raw(GPU / name)["traceEvents"]
    assert not any(e.get("cat") == "gpu_memcpy" and "Pageable" in e["name"] for e in ev)
    assert any(e.get("name") == "Memcpy HtoD (Pinned -> Device)" for e in ev)
    assert "pageable-memcpy" not in findings(GPU / name)


# ---- dataloader-stall -----------------------------------------------------------------------------------------


def _loader_share(ev: list) -> float:
    shares = []
    for s in steps_of(ev):
        a, b = s["ts"], s["ts"] + s["dur"]
        waits = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("enumerate(DataLoader)")
                 and a <= e["ts"] < b]
        shares.append(sum(min(e["ts"] + e["dur"], b) - e["ts"] for e in waits) / s["dur"])
    return sum(shares) / len(shares)


def test_dataloader_stall_on_slow_loader_gpu():
    folder = GPU / "slow_loader"
    f = findings(folder)["dataloader-stall"]
    # 99 % of the step, but the fixture has 3 steps: thin evidence caps it at warning (docs/findings.md).
    assert f["severity"] == "warning" and f["thin_evidence"] and f["share_of_step"] > 0.9
    share = _loader_share(raw(folder)["traceEvents"])
    assert share > 0.9
    ev = f["evidence"]["per_rank"][0]
    # The evidence share is over the step window, which also holds the step's GPU tail: at most the CPU share.
    assert 0.9 < ev["share_of_step"] <= share + 1e-9
    assert ev["dataloader_settings"]["num_workers"] == 0


def test_dataloader_stall_quiet_with_workers():
    assert _loader_share(raw(GPU / "big_optimized")["traceEvents"]) < 0.1
    assert "dataloader-stall" not in findings(GPU / "big_optimized")


@pytest.mark.timing
def test_dataloader_stall_cpu(cpu_slow_loader_run, cpu_clean_run):
    slow = findings(cpu_slow_loader_run)
    assert "dataloader-stall" in slow and set(slow["dataloader-stall"]["ranks"]) == {0, 1}
    d = report(cpu_clean_run)
    for r in d["ranks"]:
        for s in r["steps"]:
            assert sum(s["breakdown_us"].values()) == pytest.approx(s["wall_us"])
    clean_share = max(s["dataloader_us"] / s["wall_us"] for r in d["ranks"] for s in r["steps"])
    if clean_share < Config().dataloader_share_warning:
        assert "dataloader-stall" not in {f["id"] for f in d["findings"]}


# ---- host-sync ------------------------------------------------------------------------------------------------


def test_host_sync_on_pageable_copies_and_quiet_when_fixed():
    folder = GPU / "big_baseline"
    ev = raw(folder)["traceEvents"]
    f = findings(folder)["host-sync"]
    pageable = {e["args"]["correlation"] for e in ev if e.get("cat") == "gpu_memcpy" and "Pageable" in e["name"]}
    blocked = []
    for s in steps_of(ev):
        a, b = s["ts"], s["ts"] + s["dur"]
        calls = [e for e in ev if e.get("cat") == "cuda_runtime" and a <= e["ts"] < b and (
            e["name"] in ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")
            or e["args"].get("correlation") in pageable)]
        blocked.append(sum(min(e["ts"] + e["dur"], b) - e["ts"] for e in calls))
    per = f["evidence"]["per_rank"][0]
    assert per["blocked_us_per_step"] == pytest.approx(sum(blocked) / len(blocked), rel=1e-6)
    assert per["top_calls"][0]["call"] == "cudaMemcpyAsync"
    assert "host-sync" not in findings(GPU / "big_optimized")


# ---- gpu-idle -------------------------------------------------------------------------------------------------


def test_gpu_idle_blames_the_loader_on_slow_loader():
    f = findings(GPU / "slow_loader")["gpu-idle"]
    per = f["evidence"]["per_rank"][0]
    assert per["main_cause"] == "dataloader"
    split = per["idle_split_us_per_step"]
    assert sum(split.values()) == pytest.approx(per["idle_us_per_step"])
    assert "num_workers" in f["fix"]


def test_gpu_idle_quiet_on_a_busy_gpu():
    """The V100 run keeps its GPU more than 95 % busy in every step: no gpu-idle, no launch-bound."""
    from public_traces import DIFF_TEST, need

    need(DIFF_TEST)
    d = report(DIFF_TEST)
    assert all(s["breakdown_us"]["idle"] / s["wall_us"] < 0.05 for s in d["ranks"][0]["steps"])
    ids = {f["id"] for f in d["findings"]}
    assert "gpu-idle" not in ids and "launch-bound" not in ids


def test_big_optimized_fixes_what_big_baseline_flags():
    before = findings(GPU / "big_baseline")
    after = findings(GPU / "big_optimized")
    fixed = {"pageable-memcpy", "dataloader-stall", "host-sync", "no-mixed-precision", "sync-every-microstep"}
    assert fixed <= set(before)
    assert not fixed & set(after)
