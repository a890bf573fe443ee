"""launch-bound fires only where the GPU waited for launches, measured from the raw events (tests/reference.py):
silent on the real CUDA graph replay (fixtures/gpu_pairs/graph_replay), firing on eager twins whose GPU sits idle
while the CPU issues one op at a time (fixtures/gpu_pairs/s2_small_eager, fixtures/gpu_setup/small_pinned)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from _real import PAIRS, raw_files, report, steps_of
from reference import launch_wait_us
from traceinspect.config import DEFAULT

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
