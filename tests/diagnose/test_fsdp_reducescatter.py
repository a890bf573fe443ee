"""fsdp-exposed-reducescatter on real gloo captures (fixtures/cpu_strategies): gradient accumulation over 3 and 4
micro-batches without ``set_requires_gradient_sync(False)`` (positive), the same with it, and FSDP2 without
accumulation (negative). The evidence is checked against the raw trace JSON, read with the standard library: a
micro-batch's forward starts at FSDP2's ``FSDP::root_pre_forward`` annotation, so the reductions the last
micro-batch needs are those after the step's last one."""

from __future__ import annotations

import statistics
from functools import lru_cache

import msgspec
import pytest

from strategy_raw import FIXTURES, windows
from traceinspect.diagnose import get_rule
from analyses import analysis_of

RULE = "fsdp-exposed-reducescatter"
POSITIVE = ["fsdp2_accum3", "fsdp2_accum4_w1024"]
NEGATIVE = ["fsdp2_accum3_nosync", "fsdp2_accum4_w1024_nosync", "fsdp2_2", "fsdp2_noreshard"]
REDUCTIONS = ("FSDP::post_backward_reduce", "FSDP::post_backward_rs_wait")


@lru_cache(maxsize=None)
def report(name: str):
    return analysis_of(FIXTURES / name)


def finding(name: str) -> dict | None:
    return next((f for f in report(name).to_dict()["findings"] if f["id"] == RULE), None)


@lru_cache(maxsize=None)
def raw(name: str) -> dict:
    """rank -> per step (its number): (micro-batches, reduce-scatters, those before the last micro-batch's
    forward, training-thread us in FSDP2's reduction annotations before it, and in all of them)."""
    out: dict = {}
    for rank, ev, steps, tid in windows(name):
        mine = [e for e in ev if e.get("tid") == tid]
        for s in steps:
            a, b = s["ts"], s["ts"] + s["dur"]
            inside = [e for e in mine if a <= e["ts"] < b]
            fwd = [e["ts"] for e in inside if e["name"] == "FSDP::root_pre_forward"]
            last = max(fwd)
            rs = [e for e in inside if e["name"] == "c10d::_reduce_scatter_base_"]
            red = [e for e in inside if e["name"].startswith(REDUCTIONS)]
            out.setdefault(rank, {})[int(s["name"].split("#")[1])] = (
                len(fwd), len(rs), sum(1 for e in rs if e["ts"] < last),
                sum(e["dur"] for e in red if e["ts"] < last), sum(e["dur"] for e in red))
    return out


@pytest.mark.parametrize("name", POSITIVE)
def test_evidence_matches_the_raw_trace(name):
    f = finding(name)
    assert f is not None and f["severity"] is not None
    by_rank = {e["rank"]: e for e in f["evidence"]["per_rank"]}
    assert set(by_rank) == set(raw(name))  # every rank accumulates the same way
    for rank, steps in raw(name).items():
        e = by_rank[rank]
        assert e["basis"] == "annotations" and sorted(e["steps"]) == sorted(steps)
        rows = list(steps.values())
        assert e["backward_passes_per_step"] == statistics.median(r[0] for r in rows) == e[
            "passes_with_reduce_scatter_per_step"]
        assert e["reduce_scatters_per_step"] == pytest.approx(statistics.fmean(r[1] for r in rows))
        assert e["redundant_reduce_scatters_per_step"] == pytest.approx(statistics.fmean(r[2] for r in rows))
        assert e["redundant_reduction_us_per_step"] == pytest.approx(statistics.fmean(r[3] for r in rows), rel=1e-6)
        assert e["reduction_us_per_step"] == pytest.approx(statistics.fmean(r[4] for r in rows), rel=1e-6)
        # the claim is that time less what was waiting for the other rank (the straggler's): never more
        assert 0 < e["estimate_us_per_step"] <= e["redundant_reduction_us_per_step"] + 1e-6
    # the claim is taken from what is left of the claim rank's pools: at most its own estimate
    assert 0 < f["time_at_stake_us"] <= by_rank[f["claim_rank"]]["estimate_us_per_step"] + 1e-6


@pytest.mark.parametrize("name", NEGATIVE)
def test_silent_where_only_the_last_micro_batch_reduces(name):
    """With set_requires_gradient_sync(False) on the earlier micro-batches, or without accumulation, every
    reduce-scatter of a step closes its last backward pass: nothing to claim."""
    assert finding(name) is None
    for steps in (raw(name) if "accum" in name else {}).values():
        assert all(r[2] == 0 and r[3] == 0 for r in steps.values())


def test_the_evidence_json_is_the_record_and_the_fix_is_fsdp2s():
    rule = get_rule(RULE)
    rep = report("fsdp2_accum4_w1024")
    setups = {ra.rank: ra.setup for ra in rep.ranks}
    got = [(f, d) for f, d in zip(rep.findings, rep.to_dict()["findings"]) if f.id == RULE]
    assert len(got) == 1
    f, d = got[0]
    record = msgspec.convert(d["evidence"], rule.evidence, strict=False)
    assert set(d["evidence"]) <= set(rule.evidence.__struct_fields__)
    assert rule.fix(record, setups.get(d["ranks"][0])) == f.fix
    assert "model.set_requires_gradient_sync(is_last)" in f.fix and "no_sync()" not in f.fix
    assert "DistributedDataParallel" not in f.fix and "bucket_cap_mb" not in f.fix


def test_claims_do_not_overlap_with_the_other_communication_findings():
    """The accounting takes each claim from what is left of the step's pools: the reduce-scatter claim, the
    all-gather claim and exposed-comm's together never exceed the step (per step, on every rank)."""
    for name in POSITIVE:
        for r in report(name).to_dict()["ranks"]:
            assert RULE in {c["id"] for c in r["claims"]}
            for s in r["steps"]:
                ids = {c["id"] for c in s["claims"]}
                assert RULE in ids and len(ids) == len(s["claims"])
                assert sum(c["us"] for c in s["claims"]) <= s["wall_us"] + 1e-6
