"""The strategy and the collectives by kind on the real CPU captures of fixtures/cpu_strategies (FSDP2 at 2 and 4
ranks, its one-knob pairs, tensor parallel, a 2-stage pipeline): each count is checked against an independent count
of the raw trace events done here, with the standard library."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest

from traceinspect.analyze.strategy import rank_strategy, run_strategy
from traceinspect.report.build import build_doc
from traceinspect.run.api import analyze_path

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "cpu_strategies"
ALL = ("fsdp2_2", "fsdp2_4", "fsdp2_noreshard", "fsdp2_prefetch", "fsdp2_slow_rank1", "tp_2", "pp_1f1b", "pp_gpipe")

# The issuing ops of each kind, as torch 2.13 names them on CPU (gloo), and the kind they are.
ISSUE_OPS = {"c10d::_allgather_base_": "allgather", "c10d::_reduce_scatter_base_": "reduce_scatter",
             "_c10d_functional::all_reduce": "allreduce", "c10d::send": "send", "c10d::recv_": "recv"}


@lru_cache(maxsize=None)
def _report(name: str):
    return analyze_path(FIXTURES / name)


def _raw(path: Path) -> dict:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def _raw_counts(name: str) -> dict[int, Counter]:
    """rank -> Counter((step, kind)): the issuing ops inside each ProfilerStep#N annotation, counted from the
    trace JSON (an op nested in another counted op, e.g. c10d::allreduce_ inside _c10d_functional::all_reduce,
    is not listed in ISSUE_OPS, so nothing counts twice)."""
    out = {}
    for f in sorted((FIXTURES / name).glob("rank*.pt.trace.json.gz")):
        d = _raw(f)
        rank = d["distributedInfo"]["rank"]
        ev = d["traceEvents"]
        steps = [(int(e["name"].split("#")[1]), e["ts"], e["ts"] + e["dur"]) for e in ev
                 if e.get("name", "").startswith("ProfilerStep#")]
        c = Counter()
        for e in ev:
            kind = ISSUE_OPS.get(e.get("name"))
            if kind is None or e.get("cat") != "cpu_op":
                continue
            for s, a, b in steps:
                if a <= e["ts"] < b:
                    c[(s, kind)] += 1
        out[rank] = c
    return out


@pytest.mark.parametrize("name", ALL)
def test_counts_per_kind_and_step_match_the_raw_events(name):
    rep = _report(name)
    raw = _raw_counts(name)
    assert sorted(ra.rank for ra in rep.ranks) == sorted(raw)
    for ra in rep.ranks:
        t = ra.tables["comm_by_kind"]
        got = Counter({(int(s), k): int(n) for s, k, n in zip(t["step"], t["name"], t["count"])})
        assert got == raw[ra.rank] and sum(got.values()) > 0
        # and the rank's collectives add up to the per-step comm_calls column
        calls = dict(zip(ra.steps["step"], ra.steps["comm_calls"]))
        for s in calls:
            assert calls[s] == sum(n for (st, _), n in got.items() if st == s)


def test_wrappers_are_not_collectives_on_tensor_parallel():
    ra = _report("tp_2").ranks[0]
    raw = Counter(e["name"] for e in _raw(Path(ra.files[0]))["traceEvents"] if e.get("cat") == "cpu_op")
    assert raw["_c10d_functional::_wrap_tensor_autograd"] > 0
    c = ra.tables["collectives"]
    assert set(c["name"]) == {"allreduce"}
    assert len(c[c["step"] >= 0]) == raw["_c10d_functional::all_reduce"]


def test_reduce_scatter_booked_at_full_input_with_gloo_all_reduce_time():
    for ra in _report("fsdp2_2").ranks:
        ev = _raw(Path(ra.files[0]))["traceEvents"]
        issues = [e for e in ev if e.get("name") == "c10d::_reduce_scatter_base_"]
        # (output, input, ...): the input is the second argument, twice the output shard at 2 ranks
        inputs = sorted(e["args"]["Input Dims"][1][0] * 4 for e in issues)
        rs = ra.tables["collectives"]
        rs = rs[rs["name"] == "reduce_scatter"]
        assert sorted(rs["bytes"]) == inputs
        assert inputs[0] == 2 * issues[0]["args"]["Input Dims"][0][0] * 4
        assert rs["dur_us"].notna().all() and (rs["dur_us"] > 0).all() and set(rs["backend"]) == {"gloo"}


@pytest.mark.parametrize("name", ("pp_1f1b", "pp_gpipe"))
def test_pipeline_sends_are_never_matched_across_ranks(name):
    rep = _report(name)
    cr = rep.cross_rank
    n_p2p = sum(len(ra.tables["collectives"].query("step >= 0 and name in ['send', 'recv']")) for ra in rep.ranks)
    assert n_p2p > 0 and cr["point_to_point"] == n_p2p
    assert cr["matched"] == 0 and cr["straggler"] is None
    assert not any(f.id == "straggler" for f in rep.findings)


EXPECTED = {
    "fsdp2_2": ("fsdp2",), "fsdp2_slow_rank1": ("fsdp2",), "fsdp2_4": ("fsdp2",), "fsdp2_noreshard": ("fsdp2",), "fsdp2_prefetch": ("fsdp2",),
    "tp_2": ("tp",), "pp_1f1b": ("pp",), "pp_gpipe": ("pp",),
}


@pytest.mark.parametrize("name", ALL)
def test_strategy_named_as_captured(name):
    rep = _report(name)
    s = run_strategy(rep.ranks)
    assert s.kinds == EXPECTED[name]
    meta = rep.ranks[0].metadata["extra"]["strategy"]  # what the capture script ran (the analysis never reads it)
    if name.startswith("fsdp2"):
        assert s.reshard_after_forward is meta["reshard_after_forward"]
    if name.startswith("pp"):
        assert s.pp_stages == meta["stages"] and s.pp_microbatches == meta["microbatches"]
        assert s.pp_schedule == {"1f1b": "interleaved", "gpipe": "all-forward-then-backward"}[meta["schedule"]]
        assert all(rank_strategy(ra).pp_stages == 1 for ra in rep.ranks)
    doc = build_doc(rep)
    assert doc.strategy.kinds == list(EXPECTED[name]) and doc.strategy.parallelism == s.parallelism


def test_reshard_after_forward_shows_as_backward_all_gathers():
    raw_on = _raw_counts("fsdp2_2")[0]
    raw_off = _raw_counts("fsdp2_noreshard")[0]
    ag_on = sum(n for (_, k), n in raw_on.items() if k == "allgather")
    ag_off = sum(n for (_, k), n in raw_off.items() if k == "allgather")
    assert ag_on == 2 * ag_off  # each block gathered again for backward


def test_fsdp_straggler_named_with_its_data_step():
    """Rank 1 sleeps before each batch (outside forward, backward and the optimizer): the cross-rank record names
    it and puts its excess under the training thread's other work, most of the sleep."""
    rep = _report("fsdp2_slow_rank1")
    slow = rep.ranks[0].metadata["extra"]["slow"]
    s = rep.cross_rank["straggler"]
    assert s["rank"] == slow["rank"]
    assert s["cause"]["metric"] == "cpu_other"
    assert 0.5 * slow["ms"] * 1e3 < s["cause"]["difference_us"] < 1.5 * slow["ms"] * 1e3


def test_the_programs_own_gradient_all_reduces_are_data_parallel_not_ddp():
    """The public V100 run all-reduces each gradient itself: counted here in the raw trace, c10d::allreduce_ ops
    in every step and none of DDP's ops. Its strategy is data parallel of its own ("dp"), named so on the verdict
    line; its exposed communication is a finding (with advice that is not DDP's), DDP's bucket advice is not."""
    from public_traces import PUBLIC, need, only_file, raw_events

    folder = need(PUBLIC / "hta_v100_memory")
    names = Counter(e.get("name") for e in raw_events(only_file(folder))["traceEvents"])
    assert names["c10d::allreduce_"] >= 400 and not any(
        str(n).startswith(("DistributedDataParallel", "torch::distributed::reducer")) for n in names)
    rep = analyze_path(folder)
    s = run_strategy(rep.ranks)
    assert s.kinds == ("dp",) and "not DDP" in s.parallelism
    doc = build_doc(rep)
    assert doc.strategy.kinds == ["dp"] and doc.ranks[0].setup.parallelism == "dp"
    found = {f.id: f for f in doc.findings}
    assert "exposed-comm" in found and "bucket_cap_mb" not in found["exposed-comm"].fix
    assert not {"small-buckets", "sync-every-microstep", "ddp-gradient-copies"} & set(found)
