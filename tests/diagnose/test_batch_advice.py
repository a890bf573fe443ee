"""A fix that says "a larger batch per step" says what the memory analysis knows: the largest batch predicted to
fit where the trace has the allocator's events, that it cannot tell where it has none, and no learning rate to
rescale where the step trains nothing."""

from __future__ import annotations

import re

from _real import GPU, report
from public_traces import PUBLIC, need


def _batch_lines(d: dict) -> list[str]:
    return [line for f in d["findings"] for line in f["fix"].splitlines() if "larger batch per step" in line]


def test_a_trace_with_memory_events_names_the_batch_that_fits():
    d = report(need(PUBLIC / "tracelens_mi300_memory"))
    mem = d["ranks"][0]["memory"]
    lines = _batch_lines(d)
    assert lines
    for line in lines:
        m = re.search(r"up to (\d+) predicted to fit in memory \(today (\d+)\)", line)
        assert m and int(m.group(1)) == mem["max_batch_predicted"] and int(m.group(2)) == mem["batch_size"]
        assert "learning rate" not in line  # inference: nothing trains
    assert all("forward and backward" not in f["fix"] for f in d["findings"])


def test_a_trace_without_memory_events_says_it_cannot_tell():
    d = report(GPU / "baseline")
    assert d["ranks"][0].get("memory") is None
    lines = _batch_lines(d)
    assert lines and all("where it fits" in x and "profile_memory=True" in x and "learning rate" in x for x in lines)
