"""CPU / gloo exposed communication counts each wait once: never more than the time any collective ran (or the
training thread sat in a collective call) inside the step."""

from __future__ import annotations

import pytest

from diagnose._real import raw_files, report, steps_of, union_us

COMM_PREFIXES = ("gloo:", "c10d::", "record_param_comms", "nccl:")


def test_exposed_comm_at_most_the_union_of_collective_time(cpu_baseline_run):
    d = report(cpu_baseline_run)
    by_rank = {r["rank"]: r for r in d["ranks"]}
    checked = 0
    for raw in raw_files(cpu_baseline_run):
        rank = raw["distributedInfo"]["rank"]
        ev = [e for e in raw["traceEvents"] if e.get("ph") == "X"]
        comm = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith(COMM_PREFIXES)]
        steps = {int(s["name"].split("#")[1]): s for s in steps_of(ev)}
        for s in by_rank[rank]["steps"]:
            st = steps[s["step"]]
            a, b = st["ts"], st["ts"] + st["dur"]
            bound = union_us(comm, a, b)
            assert s["comm_exposed_us"] <= bound + 1.0
            # and it is the training thread's comm category, not that plus the tails
            assert s["comm_exposed_us"] == pytest.approx(s["breakdown_us"]["comm"], abs=1e-6)
            assert s["comm_exposed_us"] < s["wall_us"]
            checked += 1
    assert checked >= 6
