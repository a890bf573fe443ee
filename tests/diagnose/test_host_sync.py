"""host-sync on real H200 traces: the time blocked per step matches the raw JSON's synchronizing and pageable-copy
calls (quiet once they are fixed), it names the op that syncs, links the finding that owns the time of pageable
copies, and recognizes DDP's own event syncs of its first iterations (profile later, not "remove .item()")."""

from __future__ import annotations

import pytest

from _real import GPU, PAIRS, findings, raw_files, raw_one, steps_of
from public_traces import DIFF_TEST, need


def _enclosing(ev, e, cat):
    return [o for o in ev if o.get("cat") == cat and o.get("tid") == e.get("tid") and o["ts"] <= e["ts"]
            and e["ts"] + e["dur"] <= o["ts"] + o["dur"] and o is not e]


def test_pageable_copies_are_linked_to_pageable_memcpy():
    fs = findings(GPU / "big_baseline")
    f = fs["host-sync"]
    assert "pageable-memcpy" in fs
    assert f["evidence"]["owned_by"] == "pageable-memcpy"
    assert "loss.item()" not in f["fix"] and "pin_memory=True" in f["fix"]
    # independent: the blocked time of pageable copy launches, per step
    (d,) = raw_files(GPU / "big_baseline")
    ev = [e for e in d["traceEvents"] if e.get("ph") == "X"]
    pageable = {e["args"]["correlation"] for e in ev if e.get("cat") == "gpu_memcpy" and "Pageable" in e["name"]}
    per = []
    for s in steps_of(ev):
        a, b = s["ts"], s["ts"] + s["dur"]
        per.append(sum(min(e["ts"] + e["dur"], b) - e["ts"] for e in ev if e.get("cat") == "cuda_runtime"
                       and a <= e["ts"] < b and e["args"].get("correlation") in pageable))
    got = f["evidence"]["per_rank"][0]["pageable_copy_us_per_step"]
    assert got == pytest.approx(sum(per) / len(per), rel=1e-6)
    assert got >= 0.5 * f["evidence"]["per_rank"][0]["blocked_us_per_step"]


def test_ddp_runtime_stats_syncs_say_profile_later():
    folder = PAIRS / "big_fp32"
    (d,) = raw_files(folder)
    ev = [e for e in d["traceEvents"] if e.get("ph") == "X"]
    syncs = [e for e in ev if e["name"] == "cudaEventSynchronize"]
    # independent: every event sync sits in DistributedDataParallel.forward with no CPU op around it, and the
    # profiled steps are within DDP's first 10 iterations (one synchronized forward per step)
    assert syncs
    for e in syncs:
        assert not _enclosing(ev, e, "cpu_op")
        assert any(o["name"] == "DistributedDataParallel.forward" for o in _enclosing(ev, e, "user_annotation"))
    assert max(int(s["name"].split("#")[1]) for s in steps_of(ev)) <= 10
    f = findings(folder)["host-sync"]
    assert f["evidence"]["ddp_runtime_stats"] is True
    assert "skip_first" in f["fix"] and "item()" not in f["fix"].replace("no .item()", "")
    assert "DDP" in f["title"] and "skip_first" in f["title"]


def test_item_sync_names_the_op_and_keeps_the_item_fix():
    f = findings(PAIRS / "big_item")["host-sync"]
    assert "aten::_local_scalar_dense" in f["title"]
    assert "loss.detach()" in f["fix"]
    assert "owned_by" not in f["evidence"] and not f["evidence"].get("ddp_runtime_stats")


def test_item_through_a_pageable_scalar_copy_is_not_a_copy_problem():
    need(DIFF_TEST)
    f = findings(DIFF_TEST)["host-sync"]
    assert f["evidence"]["per_rank"][0]["top_calls"][0]["op"] == "aten::_local_scalar_dense"
    assert "owned_by" not in f["evidence"] and "loss.detach()" in f["fix"]


def test_host_sync_on_pageable_copies_and_quiet_when_fixed():
    folder = GPU / "big_baseline"
    ev = raw_one(folder)["traceEvents"]
    f = findings(folder)["host-sync"]
    pageable = {e["args"]["correlation"] for e in ev if e.get("cat") == "gpu_memcpy" and "Pageable" in e["name"]}
    blocked = []
    for s in steps_of(ev):
        a, b = s["ts"], s["ts"] + s["dur"]
        calls = [e for e in ev if e.get("cat") == "cuda_runtime" and a <= e["ts"] < b and (
            e["name"] in ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")
            or e["args"].get("correlation") in pageable)]
        blocked.append(sum(min(e["ts"] + e["dur"], b) - e["ts"] for e in calls))
    per = f["evidence"]["per_rank"][0]
    assert per["blocked_us_per_step"] == pytest.approx(sum(blocked) / len(blocked), rel=1e-6)
    assert per["top_calls"][0]["call"] == "cudaMemcpyAsync"
    assert "host-sync" not in findings(GPU / "big_optimized")
