"""pipeline-bubble on the real CPU (gloo) captures of fixtures/cpu_strategies: it fires on pipelines only, its JSON
evidence is its declared record and its fix that record's, and its numbers follow from the step columns (tested
against the raw events in tests/analyze/test_model_parallel.py)."""

from __future__ import annotations

import pytest

from model_parallel_runs import assert_record_and_fix, PP, findings_of, report_of
from traceinspect.diagnose.pipeline_bubble import bubble_share


@pytest.mark.parametrize("name", PP)
def test_fires_with_its_record_and_fix(name, rule="pipeline-bubble"):
    assert_record_and_fix(name, rule)


@pytest.mark.parametrize("name", PP)
def test_bubble_evidence_adds_up(name):
    (f, d), = findings_of(name, "pipeline-bubble")
    ev, rep = d["evidence"], report_of(name)
    p, m = rep.strategy.pp_stages, rep.strategy.pp_microbatches
    assert ev["stages"] == p and ev["microbatches"] == m and ev["schedule_bubble_share"] == bubble_share(p, m)
    by_rank = {ra.rank: ra.steps for ra in rep.ranks}
    for e in ev["per_rank"]:
        s = by_rank[e["rank"]]
        assert e["bubble_us_per_step"] == pytest.approx(s["pp_bubble_us"].mean())
        parts = e["fill_drain_us_per_step"] + e["imbalance_us_per_step"] + e["rest_us_per_step"]
        assert parts == pytest.approx(e["bubble_us_per_step"])
        assert e["fill_drain_us_per_step"] <= (p - 1) / m * e["compute_us_per_step"] + 1e-6
        assert e["claim_us_per_step"] == pytest.approx(f.time_at_stake_us) or f.time_at_stake_us is None
    assert ev["saving_if_1f1b_us_per_step"] == 0.0
    assert f"{100 * bubble_share(p, m):.0f} % by the schedule" in f.title


def test_the_recommendation_follows_the_evidence():
    """Where the transfers cost more than the fill and drain they would shorten (every pair here: 7-10 ms per
    send or receive on 2 shared cores), the fix asks for fewer micro-batches, and says what twice as many would cost."""
    (f, d), = findings_of("pp2_m8", "pipeline-bubble")
    ev = d["evidence"]
    assert ev["saving_if_doubled_us_per_step"] < 0 < ev["saving_if_halved_us_per_step"]
    assert ev["suggested_microbatches"] == 4 and "n_microbatches=4" in f.fix


@pytest.mark.parametrize("name", ("fsdp2_2", "tp_2"))
def test_no_bubble_finding_off_pipelines(name):
    assert not findings_of(name, "pipeline-bubble")


@pytest.mark.parametrize("name", PP)
def test_their_time_is_not_also_exposed_comm(name):
    """The pipeline's sends and receives are its bubble, TP's collectives tp-exposed-comm's: exposed-comm (data
    parallel's rule, with a fix in data parallel's terms) does not claim the same time again."""
    rep = report_of(name)
    assert rep.strategy.kinds and not {"ddp", "fsdp1", "fsdp2"} & set(rep.strategy.kinds)
    assert not findings_of(name, "exposed-comm")
    assert findings_of(name, "pipeline-bubble" if "pp" in rep.strategy.kinds else "tp-exposed-comm")
