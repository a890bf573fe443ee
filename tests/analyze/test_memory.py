"""Device memory from the allocator's events (docs/memory.md), against independent computations on real traces.

The public traces recorded with ``profile_memory`` (a V100 DDP rank, an MI300 inference run with ROCm's device type
6) are read with the standard library here and every per-step number is computed again from the raw events; CPU
captures made in the test session at two batch sizes check the prediction of the peak at another batch (the planted
leak that memory-growth names: tests/diagnose/test_memory_growth.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memory_raw import independent_steps, mem_events, raw_doc
from public_traces import PUBLIC, need
from traceinspect.analyze.rank import analyze_rank
from traceinspect.config import Config
from traceinspect.load.reader import load

V100 = PUBLIC / "hta_v100_memory"
MI300 = PUBLIC / "tracelens_mi300_memory"
NOCACHE = Config(use_cache=False, workers=1)


def test_instants_are_every_memory_event_exactly():
    doc = raw_doc(need(V100))
    raw = [e for e in doc["traceEvents"] if e.get("ph") == "i" and e.get("name") == "[memory]"]
    (rank,) = load(str(V100), NOCACHE).ranks
    inst = rank.instants
    assert len(inst) == len(raw) == 28010
    by_type = inst["device_type"].value_counts().to_dict()
    assert by_type == {1: sum(e["args"]["Device Type"] == 1 for e in raw),
                       0: sum(e["args"]["Device Type"] == 0 for e in raw)}
    assert int(inst["bytes"].sum()) == sum(e["args"]["Bytes"] for e in raw)
    assert int(inst["allocated"].max()) == max(e["args"]["Total Allocated"] for e in raw)
    assert rank.device_capacity[1] == next(p["totalGlobalMem"] for p in doc["deviceProperties"] if p["id"] == 1)


@pytest.mark.parametrize("folder,types", [(V100, (1,)), (MI300, (6,))], ids=["v100-cuda", "mi300-hip"])
def test_per_step_memory_matches_the_raw_events(folder, types):
    doc = raw_doc(need(folder))
    want = independent_steps(doc, types)
    (rank,) = load(str(folder), NOCACHE).ranks
    ra = analyze_rank(rank, NOCACHE)
    ms = ra.tables["memory_steps"].set_index("step")
    got = {int(s): r for s, r in ms[ms["events"] > 0].iterrows()}
    assert want and set(want) == set(got)
    for s, w in want.items():
        for k, v in w.items():
            assert int(got[s][k]) == v, (s, k)  # bytes are exact
    dev = ra.tables["memory_device"].iloc[0]
    assert int(dev["device_type"]) == types[0]
    cap = next(p["totalGlobalMem"] for p in doc["deviceProperties"] if p["id"] == int(dev["device_id"]))
    assert int(dev["capacity"]) == cap


def test_the_peak_is_made_of_what_is_alive_at_it():
    """What holds the peak sums to the peak: the allocations the trace saw being made and still alive, plus what
    was allocated before the recording (computed here by pairing each address's allocation with its free)."""
    doc = raw_doc(need(V100))
    (rank,) = load(str(V100), NOCACHE).ranks
    ra = analyze_rank(rank, NOCACHE)
    ms = ra.tables["memory_steps"]
    peak = int(ms["peak_allocated"].max())
    holders = ra.tables["memory_peak"]
    assert int(holders["bytes"].sum()) == peak
    mem = sorted(mem_events(doc, (1,)), key=lambda e: e["ts"])
    at = max(range(len(mem)), key=lambda i: mem[i]["args"]["Total Allocated"])
    live: dict[int, int] = {}
    for e in mem[:at + 1]:
        a, b = e["args"]["Addr"], e["args"]["Bytes"]
        if b > 0:
            live[a] = b
        elif a in live:
            del live[a]
    seen = holders[holders["origin"] != "before the recording"]
    assert int(seen["bytes"].sum()) == sum(live.values())


def test_a_trace_without_memory_events_says_why(tmp_path):
    from traceinspect.run import report_folder

    rep = report_folder(str(need(PUBLIC / "hta_ddp_2rank")), NOCACHE)
    d = rep.to_dict()
    r = d["ranks"][0]
    assert r["memory"] is None and "profile_memory=True" in r["memory_reason"]
    assert not [f for f in d["findings"] if f["id"].startswith("memory")]


# --- CPU captures: the prediction at another batch -------------------------------------------------------------

def _host_peak(folder: Path) -> tuple[int, object]:
    from traceinspect.load.reader import load as load_folder

    (rank,) = load_folder(str(folder), NOCACHE).ranks
    ra = analyze_rank(rank, NOCACHE)
    return int(ra.tables["memory_steps"]["peak_allocated"].max()), ra


@pytest.fixture(scope="module")
def batch_pair(cpu_capture_factory):
    knobs = {"num_workers": 0, "accum_steps": 1, "mlp_hidden": 2048, "probe_loader": False}
    return [cpu_capture_factory(preset="optimized", nproc=1, profile_memory=True, overrides={**knobs, "batch_size": b})
            for b in (512, 2048)]


def test_predicted_peak_at_another_batch_within_ten_percent(batch_pair):
    small, big = batch_pair
    p_small, ra_small = _host_peak(small)
    p_big, ra_big = _host_peak(big)
    assert p_big > 2 * p_small  # the planted difference is far above the allocator's rounding
    from traceinspect.analyze.outlook import memory_outlook
    pred = {p.batch: p.peak_allocated for p in memory_outlook(ra_small, NOCACHE).predicted}
    assert abs(pred[2048] - p_big) <= 0.10 * p_big
    from traceinspect.analyze.outlook import predicted_peak
    assert abs(predicted_peak(ra_big.tables["memory_scaling"], 2048, 512) - p_small) <= 0.10 * p_small
