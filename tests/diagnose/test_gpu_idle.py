"""gpu-idle on real traces: the H200 slow-loader fixture's idle GPU is blamed on the loader, with an idle split that
adds up; the V100 run, busy more than 95 % of every step, gets no gpu-idle."""

from __future__ import annotations

import pytest

from _real import GPU, findings, report


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
