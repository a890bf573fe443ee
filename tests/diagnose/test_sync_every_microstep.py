"""sync-every-microstep: at world size 1 nothing is sent, and the title says so."""

from __future__ import annotations

from _real import GPU, findings, raw_files


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
