"""straggler in an FSDP2 job (fixtures/cpu_strategies, 2 ranks, gloo): rank 1 sleeps 60 ms before each batch.

``fsdp2_slow_loader_rank1`` sleeps inside its DataLoader's ``__getitem__``: the cause is the DataLoader, as in
DDP. ``fsdp2_slow_rank1`` sleeps in the loop outside any annotation: the cause is the training thread's other
(unannotated) work, all the trace can say. In both the late rank is named and its excess over the other rank, from
the raw events here, is about the 60 ms sleep."""

from __future__ import annotations

import gzip
import json
from functools import lru_cache
from pathlib import Path

import pytest

from traceinspect.config import Config
from traceinspect.run.api import analyze_path

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "cpu_strategies"
LOADER_NEXT = "enumerate(DataLoader)#"


@lru_cache(maxsize=None)
def _doc(name: str) -> dict:
    return analyze_path(FIXTURES / name, Config(use_cache=False, workers=1)).to_dict()


def _loader_ms_per_step(name: str) -> dict[int, float]:
    """rank -> mean DataLoader ``__next__`` time per ProfilerStep#N (ms), from the trace JSON."""
    out = {}
    for f in sorted((FIXTURES / name).glob("rank*.pt.trace.json.gz")):
        with gzip.open(f, "rt") as fh:
            d = json.load(fh)
        ev = [e for e in d["traceEvents"] if e.get("ph") == "X"]
        steps = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith("ProfilerStep#")]
        fetch = [e for e in ev if e["name"].startswith(LOADER_NEXT)]
        total = sum(e["dur"] for e in fetch if any(a <= e["ts"] < b for a, b in steps))
        out[d["distributedInfo"]["rank"]] = total / len(steps) / 1000
    return out


def _straggler(name: str) -> dict:
    fs = [f for f in _doc(name)["findings"] if f["id"] == "straggler"]
    assert len(fs) == 1, (name, [f["id"] for f in _doc(name)["findings"]])
    return fs[0]


def test_slow_loader_rank_is_named_with_the_dataloader_as_cause():
    f = _straggler("fsdp2_slow_loader_rank1")
    assert f["ranks"] == [1] and f["title"].startswith("Rank 1 ")
    assert _doc("fsdp2_slow_loader_rank1")["strategy"]["kinds"] == ["fsdp2"]
    cause = f["evidence"]["cause"]
    assert cause["metric"] == "dataloader_us" and "DataLoader" in f["title"]
    raw = _loader_ms_per_step("fsdp2_slow_loader_rank1")
    assert raw[1] - raw[0] == pytest.approx(cause["difference_us"] / 1000, rel=0.05)
    assert 50 < raw[1] - raw[0] < 80  # the 60 ms sleep
    assert "DataLoader" in f["fix"] and "rank 1" in f["fix"]
    assert "pin_memory" not in f["fix"]  # a CPU-only run: no GPU advice


def test_slow_rank_outside_the_loader_is_named_with_its_unannotated_work():
    """One late arrival per step (the first all-gather) among eleven where the ranks take turns: the count alone
    does not pick rank 1, the waiting it causes and the cause that explains it do."""
    f = _straggler("fsdp2_slow_rank1")
    ev = f["evidence"]
    assert f["ranks"] == [1] and ev["last_share"] < 0.6
    assert ev["cause"]["metric"] == "cpu_other" and 50_000 < ev["cause"]["difference_us"] < 80_000
    assert ev["caused_wait_share"] > 0.5


@pytest.mark.parametrize("name", ["fsdp2_2", "fsdp2_4"])
def test_no_straggler_where_no_rank_is_slowed(name):
    assert not [f for f in _doc(name)["findings"] if f["id"] == "straggler"]
