"""A big rank's analyses side by side (this process and forked workers each claiming the next part, heaviest
first: ``run/services.py``'s fan-out) give exactly the one-process RankAnalysis: the same tables in the same order,
the same step columns."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from traceinspect.analyze import rank as R
from traceinspect.config import Config
from traceinspect.load.reader import load
from traceinspect.run import pool as pool_module, services
from traceinspect.run.pool import can_fork
from traceinspect.thresholds import Thresholds

from public_traces import DIFF_CONTROL, need


@pytest.mark.skipif(not can_fork(), reason="side-by-side analyses need fork")
def test_side_by_side_equals_one_process(monkeypatch):
    trace = load(need(DIFF_CONTROL), Config(use_cache=False, workers=1))
    rk = trace.ranks[0]
    one = R.analyze_rank(rk, Thresholds())
    monkeypatch.setattr(services, "PARALLEL_MIN_EVENTS", 0)  # this capture is smaller than the threshold
    pools = []
    real = pool_module.process_pool
    monkeypatch.setattr(pool_module, "process_pool", lambda *a, **k: pools.append(a) or real(*a, **k))
    config = Config(use_cache=False, workers=2)
    two = R.analyze_rank(rk, config.thresholds, services.rank_fan_out(config.options, config.limits))
    assert pools  # the side-by-side path ran
    assert list(two.tables) == list(one.tables) and len(one.tables) > 6
    for name, table in one.tables.items():
        pd.testing.assert_frame_equal(two.tables[name], table, check_exact=True)
    pd.testing.assert_frame_equal(two.steps, one.steps, check_exact=True)
    assert two.errors == one.errors == []


def test_the_rank_analysis_is_frozen():
    trace = load(need(DIFF_CONTROL), Config(use_cache=False, workers=1))
    ra = R.analyze_rank(trace.ranks[0], Thresholds())
    with pytest.raises(dataclasses.FrozenInstanceError):
        ra.steps = ra.steps.head(1)


def test_the_capturable_intervals_are_made_once_in_a_process(monkeypatch):
    """The CPU-issue analysis and the idle split both read the capturable intervals: in one process they are made
    once (``rank.SharedInputs``), and the columns equal those of each analysis making its own."""
    from traceinspect.analyze import idle, issue

    trace = load(need(DIFF_CONTROL), Config(use_cache=False, workers=1))
    rk = trace.ranks[0]
    calls = []
    real = issue.capturable_intervals
    counted = lambda *a, **k: calls.append(1) or real(*a, **k)  # noqa: E731
    monkeypatch.setattr(issue, "capturable_intervals", counted)
    monkeypatch.setattr(idle, "capturable_intervals", counted)
    ra = R.analyze_rank(rk, Thresholds())
    assert len(calls) == 1
    steps = R.find_steps(rk)
    table = R.attribute(rk, steps, Thresholds())
    alone = {**issue.rank_part(rk, steps, table).columns, **idle.rank_part(rk, steps, table).columns}
    assert len(calls) == 3 and {"cpu_capturable_us", "idle_launch_capturable_us"} <= set(alone)
    for col, values in alone.items():
        assert ra.steps[col].to_numpy().tobytes() == pd.Series(values).to_numpy().tobytes(), col
