"""Idle time by what the GPU waited for (analyze/idle.py): the six categories of a step add up to its idle time on
every fixture and public trace, and equal an independent computation from the raw events on real traces."""

from __future__ import annotations

import gzip
import json
import re
import statistics
from pathlib import Path

import pytest

from reference import union_us
from traceinspect.config import Config
from traceinspect.run import report_folder
from sweeps import sweep

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = ROOT.parent / "shared" / "traces" / "public"
CATS = ("idle_queued_us", "idle_blocked_us", "idle_first_launch_us", "idle_loader_us", "idle_launch_us", "idle_host_us")
CACHED = Config(workers=1)

SYNC = {"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy", "cudaMemcpy2D",
        "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize", "hipDeviceSynchronize",
        "hipStreamSynchronize", "hipEventSynchronize", "hipMemcpy", "hipMemcpyWithStream", "cuMemcpyDtoH",
        "cuMemcpyHtoD", "cuMemcpy", "cudaMemcpyToSymbol", "cudaMemcpyFromSymbol", "hipMemcpy2D", "hipMemcpyDtoH",
        "hipMemcpyHtoD", "hipCtxSynchronize", "cuMemcpy2D"}


def _steps(folder: Path) -> list[dict]:
    return report_folder(folder, CACHED).to_dict()["ranks"]


@pytest.mark.parametrize("folder", sweep())
def test_idle_categories_add_up_to_idle(folder):
    for rank in _steps(folder):
        for s in rank["steps"]:
            if s["basis"] != "gpu":
                assert all(c not in s for c in CATS)
                continue
            parts = [s[c] for c in CATS]
            assert min(parts) >= -1e-6
            assert sum(parts) == pytest.approx(s["breakdown_us"]["idle"], abs=1e-3)


def _reference(path: Path, step: dict) -> dict:
    """The split of one step from the raw events, by plain unions: category k's time is the union of the GPU
    events and categories 1..k less the union of the GPU events and categories 1..k-1, in the step window."""
    with gzip.open(path, "rt") as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    cat = lambda e: str(e.get("cat", "")).lower()  # noqa: E731
    gpu = [e for e in ev if cat(e) in ("kernel", "gpu_memcpy", "gpu_memset")]
    runtime = [e for e in ev if cat(e) in ("cuda_runtime", "cuda_driver")]
    by_corr = {}
    for r in runtime:
        c = (r.get("args") or {}).get("correlation")
        if c is not None and c >= 0:
            by_corr.setdefault(c, r)
    queued = []
    for g in gpu:
        r = by_corr.get((g.get("args") or {}).get("correlation"))
        if r is not None and g["ts"] > r["ts"] + r["dur"] + 10.0:
            queued.append((r["ts"] + r["dur"] + 10.0, g["ts"]))
    pageable = {(g.get("args") or {}).get("correlation") for g in gpu if "Pageable" in g["name"]
                and cat(g) == "gpu_memcpy"}
    sync = [(r["ts"], r["ts"] + r["dur"]) for r in runtime
            if re.sub(r"_v\d+$", "", r["name"]) in SYNC or (r.get("args") or {}).get("correlation") in pageable]
    launches = [by_corr[c] for c in {(g.get("args") or {}).get("correlation") for g in gpu} if c in by_corr]
    launches = [r for r in launches if (r["ts"], r["ts"] + r["dur"]) not in set(sync)]
    med = statistics.median(r["dur"] for r in launches) if launches else 0.0
    first = [(r["ts"], r["ts"] + r["dur"]) for r in launches if r["dur"] >= max(50 * med, 500.0)]
    loader = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith("enumerate(DataLoader)")
              and cat(e) in ("cpu_op", "user_annotation")]
    cpu = [(step["cpu_start_us"], step["cpu_end_us"])]
    layers = [[(g["ts"], g["ts"] + g["dur"]) for g in gpu], queued, sync, first, loader, cpu]
    a, b = step["start_us"], step["end_us"]
    acc, prev, out = [], 0.0, {}
    for name, layer in zip(("busy", *CATS), layers):
        acc += layer
        u = union_us(acc, a, b)
        out[name] = u - prev
        prev = u
    out["idle_host_us"] = (b - a) - prev
    return out


@pytest.mark.parametrize("folder,expect", [
    (PUBLIC / "hta_mi250_rocm", "idle_first_launch_us"),  # a 6.5 ms first hipLaunchKernel (lazy module load)
    (ROOT / "fixtures" / "gpu_pairs" / "graph_replay", "idle_queued_us"),
    (ROOT / "fixtures" / "gpu_pairs" / "small_clean", "idle_launch_us"),
    (ROOT / "fixtures" / "gpu" / "baseline", "idle_loader_us"),
], ids=lambda x: x.name if isinstance(x, Path) else x)
def test_idle_split_matches_the_raw_events(folder, expect):
    if not folder.exists():
        pytest.skip(f"public traces not present at {folder}")
    (path,) = sorted(folder.glob("*.json.gz"))
    rank = _steps(folder)[0]
    steps = [s for s in rank["steps"] if not s["synthetic"]]
    assert steps
    for s in steps:
        ref = _reference(path, s)
        for c in CATS:
            assert s[c] == pytest.approx(ref[c], abs=0.05), (s["step"], c)
    assert sum(s[expect] for s in steps) > 0


def test_first_use_launch_is_not_launch_overhead():
    """On the public MI250 trace the one long first hipLaunchKernel is most of the idle time; launch overhead the
    rest."""
    folder = PUBLIC / "hta_mi250_rocm"
    if not folder.exists():
        pytest.skip(f"public traces not present at {folder}")
    (path,) = sorted(folder.glob("*.json.gz"))
    with gzip.open(path, "rt") as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and e.get("name") == "hipLaunchKernel"]
    longest = max(e["dur"] for e in ev)
    (s,) = _steps(folder)[0]["steps"]
    assert s["first_launch_count"] == 1
    assert s["idle_first_launch_us"] == pytest.approx(longest, rel=0.05)
    assert s["idle_first_launch_us"] > s["idle_launch_us"]
