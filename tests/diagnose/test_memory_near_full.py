"""memory-near-full on the public V100 DDP rank recorded with ``profile_memory``: 12.8 GB reserved of a 32 GB card is
far from full, so it is quiet; with the threshold lowered just below the share the raw events give (CONSTRUCTED: the
same analysis, the rules run again) it fires with that share and the card's capacity from ``deviceProperties``, and
just above it it is quiet again."""

from __future__ import annotations

import copy

import pytest

from traceinspect.config import Config
from traceinspect.diagnose.engine import finish

from analyses import analysis_of
from memory_raw import independent_steps, raw_doc
from public_traces import PUBLIC, need

V100 = PUBLIC / "hta_v100_memory"
NOCACHE = Config(use_cache=False, workers=1)


def _near_full(rep, config=NOCACHE) -> list:
    again = finish(rep.source, copy.deepcopy(rep.ranks), rep.skipped, rep.world_size, config)
    return [f for f in again.findings if f.id == "memory-near-full"]


def _share() -> tuple[float, int, int]:
    """(peak reserved / capacity, peak reserved, capacity) from the raw trace alone."""
    doc = raw_doc(need(V100))
    reserved = max(s["peak_reserved"] for s in independent_steps(doc, (1,)).values())
    device = next(e["args"]["Device Id"] for e in doc["traceEvents"]
                  if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1)
    capacity = next(p["totalGlobalMem"] for p in doc["deviceProperties"] if p["id"] == device)
    return reserved / capacity, reserved, capacity


def test_quiet_far_from_full():
    share, _, _ = _share()
    assert share < NOCACHE.memory_near_full_share
    assert not _near_full(analysis_of(V100))


def test_fires_at_the_share_the_raw_events_give():
    share, reserved, capacity = _share()
    rep = analysis_of(V100)
    (f,) = _near_full(rep, NOCACHE.with_overrides(memory_near_full_share=0.99 * share))
    (e,) = f.evidence["per_rank"]
    assert e["peak_reserved_bytes"] == reserved and e["capacity_bytes"] == capacity == f.evidence["capacity_bytes"]
    assert e["share"] == pytest.approx(share) and e["oom_events"] == 0
    assert f.severity == "warning"  # below the critical share, no failed allocation
    assert not _near_full(rep, NOCACHE.with_overrides(memory_near_full_share=1.01 * share))
