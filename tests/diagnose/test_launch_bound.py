"""launch-bound counts a CUDA graph replay as one launch of all its kernels (fixtures/gpu_pairs/graph_replay: a
64-layer MLP forward captured as a CUDA graph, replayed 4 times a step)."""

from __future__ import annotations

import dataclasses
import statistics

import pytest

from _real import CFG, PAIRS, raw_files, steps_of
from traceinspect.run.stages import analyze
from traceinspect.load.reader import load

GRAPH = PAIRS / "graph_replay"


def _independent(folder):
    """Per step from the raw events: graph launches, and per launch call the summed time of the kernels that
    share its correlation id."""
    (d,) = raw_files(folder)
    ev = [e for e in d["traceEvents"] if e.get("ph") == "X"]
    kernels: dict = {}
    for e in ev:
        if e.get("cat") == "kernel":
            kernels.setdefault(e["args"]["correlation"], []).append(e["dur"])
    out = {}
    for s in steps_of(ev):
        a, b = s["ts"], s["ts"] + s["dur"]
        calls = [e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver") and a <= e["ts"] < b
                 and e["args"].get("correlation") in kernels]
        out[int(s["name"].split("#")[1])] = {
            "graphs": sum(e["name"] == "cudaGraphLaunch" for e in calls),
            "per_launch": [sum(kernels[e["args"]["correlation"]]) for e in calls],
            "kernels": sum(len(kernels[e["args"]["correlation"]]) for e in calls),
        }
    return out


def test_graph_replays_are_launches_of_whole_graphs():
    ref = _independent(GRAPH)
    rep = analyze(load(GRAPH, CFG), CFG)
    s = rep.ranks[0].steps.set_index("step")
    for step, r in ref.items():
        assert r["graphs"] == 4
        assert s.loc[step, "graph_launch_count"] == 4
        assert s.loc[step, "launch_gpu_median_us"] == pytest.approx(statistics.median(r["per_launch"]), rel=1e-6)
        assert s.loc[step, "kernels_per_launch"] == pytest.approx(r["kernels"] / len(r["per_launch"]))
        # one graph launch runs a 192-kernel graph: far more GPU time per launch than per kernel
        assert max(r["per_launch"]) > 100 * s.loc[step, "median_kernel_us"]


def test_graph_replay_is_not_launch_bound_even_with_a_low_idle_threshold():
    cfg = dataclasses.replace(CFG, launch_bound_idle_share=0.05)
    rep = analyze(load(GRAPH, cfg), cfg)
    assert "launch-bound" not in {f.id for f in rep.findings}


def test_eager_launches_still_launch_bound():
    rep = analyze(load(PAIRS / "small_clean", CFG), CFG)
    (f,) = [f for f in rep.findings if f.id == "launch-bound"]
    per = f.evidence["per_rank"][0]
    assert per["graph_launches_per_step"] == 0 and per["kernels_per_launch"] == pytest.approx(1.0)
    assert per["gpu_us_per_launch_median"] < per["cpu_us_per_launch"]
