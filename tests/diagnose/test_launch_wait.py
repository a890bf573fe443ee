"""launch-bound fires only where the GPU waited for launches, measured from the raw events (tests/reference.py):
silent on the real CUDA graph replay (fixtures/gpu_pairs/graph_replay), firing on eager twins whose GPU sits idle
while the CPU issues one op at a time (fixtures/gpu_pairs/s2_small_eager, fixtures/gpu_setup/small_pinned)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from _real import PAIRS, raw_files, report, steps_of
from reference import capturable_intervals, issuing_tids, launch_wait_us, launch_wait_within_us, union_us
from traceinspect.config import DEFAULT

pytestmark = pytest.mark.slow  # the launch wait recomputed event by event from the raw JSON of the largest fixtures

SETUP = Path(__file__).resolve().parents[2] / "fixtures" / "gpu_setup"
SHARE = DEFAULT.launch_bound_idle_share


def _waits(folder):
    """Per step of the report: (launch wait from the raw events, the step's wall), and the report."""
    (d,) = raw_files(folder)
    ev = [e for e in d["traceEvents"] if e.get("ph") == "X"]
    cpu = {int(s["name"].split("#")[1]): (s["ts"], s["ts"] + s["dur"]) for s in steps_of(ev)}
    rep = report(folder)
    steps = rep["ranks"][0]["steps"]
    return [(launch_wait_us(ev, (s["start_us"], s["end_us"]), cpu[s["step"]]), s) for s in steps], rep


def test_graph_replay_gpu_barely_waits_for_launches_and_launch_bound_is_silent():
    waits, rep = _waits(PAIRS / "graph_replay")
    shares = [w / s["wall_us"] for w, s in waits]
    assert max(shares) < SHARE  # 4 graph replays a step: the GPU waits for the CPU a tenth of the step at most
    for w, s in waits:  # the idle split's launch overhead is that wait (the first-use part aside)
        assert s["idle_launch_us"] == pytest.approx(w, rel=0.1, abs=20.0)
    assert "launch-bound" not in {f["id"] for f in rep["findings"]}


@pytest.mark.parametrize("folder", [PAIRS / "s2_small_eager", SETUP / "small_pinned"], ids=lambda p: p.name)
def test_eager_twin_is_launch_bound_by_what_the_gpu_waited_for(folder):
    waits, rep = _waits(folder)
    shares = [w / s["wall_us"] for w, s in waits]
    assert statistics.median(shares) > 0.5  # one kernel per op: the GPU waits for most of the step
    (f,) = [f for f in rep["findings"] if f["id"] == "launch-bound"]
    mean_wait = statistics.fmean(w for w, _ in waits)
    # the claim is the launch overhead the GPU waited for, not more
    assert f["time_at_stake_us"] <= 1.05 * mean_wait
    assert f["time_at_stake_us"] >= 0.5 * mean_wait
    for w, s in waits:
        assert s["idle_launch_us"] == pytest.approx(w, rel=0.1, abs=20.0)


def test_launch_bound_leaves_the_optimizer_step_to_its_own_finding():
    """deep_single (DDP, 48 layers, a per-parameter AdamW): optimizer-not-fused claims the optimizer step's CPU time;
    launch-bound claims only the launch wait while the CPU ran what a CUDA graph of the model removes, computed here
    from the raw events (tests/reference.py), which never overlaps an optimizer step. Together they claim no more
    than the GPU waited for launches."""
    folder = PAIRS / "deep_single"
    (d,) = raw_files(folder)
    ev = [e for e in d["traceEvents"] if e.get("ph") == "X"]
    tids = issuing_tids(ev)
    cpu = {int(s["name"].split("#")[1]): (s["ts"], s["ts"] + s["dur"]) for s in steps_of(ev)}
    opt = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "user_annotation"
           and e["name"].startswith("Optimizer.step#")]
    rep = report(folder)
    inside, waits = [], []
    for s in rep["ranks"][0]["steps"]:
        iv = capturable_intervals(ev, cpu[s["step"]], tids)
        overlap = sum(union_us([(max(a, o0), min(b, o1))]) for a, b in iv for o0, o1 in opt if min(b, o1) > max(a, o0))
        assert overlap == 0.0
        window = (s["start_us"], s["end_us"])
        inside.append(launch_wait_within_us(ev, window, cpu[s["step"]], iv))
        waits.append(launch_wait_us(ev, window, cpu[s["step"]]))
    claims = {f["id"]: f["time_at_stake_us"] for f in rep["findings"]}
    assert claims["optimizer-not-fused"] > 10_000.0  # 14.5 ms a step of per-parameter optimizer work
    assert claims["launch-bound"] <= 1.05 * statistics.fmean(inside)
    assert claims["launch-bound"] + claims["optimizer-not-fused"] <= 1.05 * statistics.fmean(waits)


@pytest.mark.parametrize("folder", [PAIRS / "deep_single", SETUP / "small_compiled", SETUP / "small_graphs"],
                         ids=lambda p: p.name)
def test_capturable_time_and_its_launch_wait_match_the_raw_events(folder):
    """DDP runs eager, compiled and compiled with CUDA graphs (DataLoader workers, collectives, Dynamo's lookups):
    cpu_capturable_us and idle_launch_capturable_us against tests/reference.py, step by step."""
    (d,) = raw_files(folder)
    ev = [e for e in d["traceEvents"] if e.get("ph") == "X"]
    tids = issuing_tids(ev)
    cpu = {int(s["name"].split("#")[1]): (s["ts"], s["ts"] + s["dur"]) for s in steps_of(ev)}
    for s in report(folder)["ranks"][0]["steps"]:
        iv = capturable_intervals(ev, cpu[s["step"]], tids)
        assert s["cpu_capturable_us"] == pytest.approx(union_us(iv), abs=1.0), s["step"]
        wait = launch_wait_within_us(ev, (s["start_us"], s["end_us"]), cpu[s["step"]], iv)
        assert s["idle_launch_capturable_us"] == pytest.approx(wait, rel=0.05, abs=20.0), s["step"]
        assert s["idle_launch_capturable_us"] <= s["idle_launch_us"] + 1e-6
