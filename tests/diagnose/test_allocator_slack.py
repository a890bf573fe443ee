"""allocator-slack on the public traces recorded with ``profile_memory``: the V100 DDP rank's allocator reserves
12.8 GB for a peak of 6.6 GB allocated, and the finding's bytes are those of the raw ``[memory]`` events; the MI300
run's few MB of slack are below the rule's 1 GiB; the two thresholds are its boundary (CONSTRUCTED: the same
analysis, the rules run again with the threshold just above and just below what the trace shows)."""

from __future__ import annotations

import copy

import pytest

from traceinspect.config import Config
from traceinspect.diagnose.engine import finish

from analyses import analysis_of
from memory_raw import independent_steps, raw_doc
from public_traces import PUBLIC, need

V100 = PUBLIC / "hta_v100_memory"
MI300 = PUBLIC / "tracelens_mi300_memory"
NOCACHE = Config(use_cache=False, workers=1)


def _peaks(folder, device_types) -> tuple[int, int]:
    """(largest peak reserved, largest peak allocated) over the steps, from the raw events alone."""
    steps = independent_steps(raw_doc(folder), device_types).values()
    return max(s["peak_reserved"] for s in steps), max(s["peak_allocated"] for s in steps)


def _slack(rep, config=NOCACHE) -> list:
    again = finish(rep.source, copy.deepcopy(rep.ranks), rep.skipped, rep.world_size, config)
    return [f for f in again.findings if f.id == "allocator-slack"]


def test_fires_on_the_v100_run_with_the_bytes_of_the_raw_events():
    reserved, allocated = _peaks(need(V100), (1,))
    (f,) = [f for f in analysis_of(V100).findings if f.id == "allocator-slack"]
    (e,) = f.evidence["per_rank"]
    assert (e["peak_reserved_bytes"], e["peak_allocated_bytes"]) == (reserved, allocated)
    assert e["slack_bytes"] == reserved - allocated == f.evidence["bytes_at_stake"]
    assert e["slack_share"] == pytest.approx((reserved - allocated) / reserved)
    # 37 % of a 32 GB V100 reserved: not near full, so the slack costs no batch yet
    assert f.evidence["near_full"] is False and f.severity == "info"
    assert "expandable_segments:True" in f.fix


def test_quiet_on_the_mi300_run_below_a_gib():
    reserved, allocated = _peaks(need(MI300), (6,))
    assert reserved - allocated < NOCACHE.allocator_slack_min_bytes
    assert not [f for f in analysis_of(MI300).findings if f.id == "allocator-slack"]


def test_the_thresholds_are_its_boundary():
    reserved, allocated = _peaks(need(V100), (1,))
    slack, rep = reserved - allocated, analysis_of(V100)
    assert _slack(rep, NOCACHE.with_overrides(allocator_slack_min_bytes=slack))
    assert not _slack(rep, NOCACHE.with_overrides(allocator_slack_min_bytes=slack + 1))
    assert _slack(rep, NOCACHE.with_overrides(allocator_slack_share=0.99 * slack / reserved))
    assert not _slack(rep, NOCACHE.with_overrides(allocator_slack_share=1.01 * slack / reserved))
