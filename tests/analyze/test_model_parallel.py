"""The pipeline bubble and the exposed tensor-parallel collectives per step on the real CPU (gloo) captures of
fixtures/cpu_strategies, each checked against an independent computation from the raw trace events with the
standard library (tests/strategy_raw.py): the union, inside each ProfilerStep#N annotation, of the training thread's records of the
transfers (c10d::send / c10d::recv_ and gloo:send / gloo:recv) or of the functional collectives and their waits."""

from __future__ import annotations

from functools import lru_cache

import pytest

from strategy_raw import FIXTURES, P2P, P2P_ISSUE, TP_COUNTED, TP_OPS, per_step
from traceinspect.analyze.strategy import run_strategy
from traceinspect.config import Config
from traceinspect.report.build import build_doc
from traceinspect.run.api import analyze_path
from analyses import analysis_of

PP = ("pp_1f1b", "pp_gpipe", "pp2_m4", "pp2_m8", "pp2_gpipe", "pp2_1f1b", "pp4_m4", "pp4_m8")
TP = ("tp_2", "tp_4", "tp2_replicate", "tp2_rowwise")
NOT_PP = ("fsdp2_2", "tp_2")


@lru_cache(maxsize=None)
def _report(name: str):
    return analysis_of(FIXTURES / name)


def _check(name: str, col: str, share: str, count: str, names, counted):
    expected = per_step(name, frozenset(names), frozenset(counted))
    rep = _report(name)
    seen = 0
    for ra in rep.ranks:
        for row in ra.steps.to_dict("records"):
            _, us, n = expected[(ra.rank, int(row["step"]))]
            assert row[col] == pytest.approx(us, abs=1.0), (ra.rank, row["step"])
            assert row[count] == n
            assert row[share] == pytest.approx(row[col] / row["wall_us"])
            seen += 1
    assert seen >= 12 and any(v[1] > 0 for v in expected.values())
    return rep


@pytest.mark.parametrize("name", PP)
def test_pipeline_bubble_is_the_training_thread_in_transfers(name):
    rep = _check(name, "pp_bubble_us", "pp_bubble_share", "pp_transfer_count", P2P, P2P_ISSUE)
    doc = build_doc(rep)
    assert all("pp_bubble_us" in s.__struct_fields__ for s in doc.ranks[0].steps)
    assert doc.ranks[0].steps[0].pp_bubble_us == pytest.approx(rep.ranks[0].steps["pp_bubble_us"].iat[0])


@pytest.mark.parametrize("name", TP)
def test_tp_exposed_comm_is_the_training_thread_in_functional_collectives(name):
    _check(name, "tp_comm_exposed_us", "tp_comm_share", "tp_collective_count", TP_OPS, TP_COUNTED)


@pytest.mark.parametrize("name", NOT_PP)
def test_no_bubble_where_nothing_is_sent(name):
    rep = _report(name)
    assert all("pp_bubble_us" not in ra.steps for ra in rep.ranks)
    assert not any(f.id == "pipeline-bubble" for f in rep.findings)


def test_a_gpu_trace_gets_no_columns():
    """On a GPU-basis rank the training thread's waits say nothing of the device: no value, not a wrong one."""
    gpu = sorted((FIXTURES.parent / "gpu").iterdir())[0]
    rep = analyze_path(gpu, Config(use_cache=False, workers=1))
    assert rep.ranks and all(ra.basis == "gpu" for ra in rep.ranks)
    assert all(not {"pp_bubble_us", "tp_comm_exposed_us"} & set(ra.steps) for ra in rep.ranks)


@pytest.mark.parametrize("name", ("pp4_m4", "pp4_m8", "pp2_m8", "pp2_gpipe"))
def test_new_pipelines_named_as_captured(name):
    """4 stages: the middle stages send both ways (2 per micro-batch), and the first stage's 1F1B warm-up looks
    like GPipe; the micro-batches are the fewest per rank and the schedule is the last stage's."""
    rep = _report(name)
    s = run_strategy(rep.ranks)
    meta = rep.ranks[0].metadata["extra"]["strategy"]  # what the capture script ran (the analysis never reads it)
    assert s.kinds == ("pp",) and s.pp_stages == meta["stages"] and s.pp_microbatches == meta["microbatches"]
    assert s.pp_schedule == {"1f1b": "interleaved", "gpipe": "all-forward-then-backward"}[meta["schedule"]]


@pytest.mark.parametrize("name", ("tp_4", "tp2_replicate"))
def test_new_tensor_parallel_named(name):
    assert run_strategy(_report(name).ranks).kinds == ("tp",)
