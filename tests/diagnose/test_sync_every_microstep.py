"""sync-every-microstep: it fires on a gloo capture without no_sync and not on its twin with it (the rounds and bytes
checked against the raw JSON); at world size 1 nothing is sent, and the title says so."""

from __future__ import annotations

import math

import pytest

from _real import GPU, findings, raw_files
from comm_captures import GRAD_BYTES, findings_of, profiler_steps, raw_of, x_events


def test_world_size_1_sends_nothing():
    folder = GPU / "big_baseline"
    (d,) = raw_files(folder)
    assert d["distributedInfo"]["world_size"] == 1
    f = findings(folder)["sync-every-microstep"]
    assert "sent for nothing" not in f["title"]
    assert "nothing is sent" in f["title"]
    assert f["evidence"]["per_rank"][0]["world_size"] == 1


def test_world_size_2_keeps_the_redundant_traffic(cpu_baseline_run):
    ws = {d["distributedInfo"]["world_size"] for d in raw_files(cpu_baseline_run)}
    assert ws == {2}
    f = findings(cpu_baseline_run)["sync-every-microstep"]
    assert "nothing is sent" not in f["title"]
    assert {e["world_size"] for e in f["evidence"]["per_rank"]} == {2}


@pytest.mark.timing
def test_sync_every_microstep_fires_without_no_sync_only(comm_capture, comm_report):
    rep = comm_report("default_sync")
    (f,) = findings_of(rep, "sync-every-microstep")
    # the twin: no_sync=True (its slow loader on rank 1 does not change how gradients are synchronized)
    assert not findings_of(comm_report("slow_rank_2"), "sync-every-microstep")
    folder = comm_capture("default_sync")
    grad = GRAD_BYTES
    for e in f.evidence["per_rank"]:
        raw = raw_of(folder, e["rank"])
        for s in profiler_steps(raw):
            ev = [x for x in x_events(raw) if s["ts"] <= x["ts"] < s["ts"] + s["dur"]]
            micro = sum(x["name"] == "DistributedDataParallel.forward" for x in ev)
            works = [x for x in ev if x["name"] == "gloo:all_reduce"]
            assert micro == 4 and len(works) == 4  # one bucket (0.8 MB < 25 MB) per micro-batch
            assert sum(math.prod(w["args"]["Input Dims"][0]) * 4 for w in works) == 4 * grad
        assert e["allreduce_rounds_per_step"] == 4 == e["backward_passes_per_step"]
        assert e["grad_bytes_per_round"] == grad
        assert e["redundant_bytes_per_step"] == 3 * grad
        assert e["accumulation_steps_recorded"] == 4 and e["no_sync_recorded"] is False
    assert "no_sync()" in f.fix
    nos = comm_report("slow_rank_2")
    for ra in nos.ranks:
        assert (ra.steps["allreduce_rounds"] == 1).all() and (ra.steps["backward_passes"] == 4).all()
