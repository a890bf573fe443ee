"""tp-exposed-comm on the real CPU (gloo) captures of fixtures/cpu_strategies: it fires on tensor parallel runs only,
its JSON evidence is its declared record and its fix that record's, which pairs the plan only where it
redistributes."""

from __future__ import annotations

import pytest

from model_parallel_runs import assert_record_and_fix, TP, findings_of, report_of


@pytest.mark.parametrize("name", TP)
def test_fires_with_its_record_and_fix(name, rule="tp-exposed-comm"):
    assert_record_and_fix(name, rule)


@pytest.mark.parametrize("name", ("pp2_m4", "fsdp2_2"))
def test_no_tp_finding_off_tensor_parallel(name):
    assert not findings_of(name, "tp-exposed-comm")


def test_tp_fix_pairs_the_plan_only_where_it_redistributes():
    (f, _), = findings_of("tp2_replicate", "tp-exposed-comm")
    (g, _), = findings_of("tp2_rowwise", "tp-exposed-comm")
    assert "RowwiseParallel()" in f.fix and "Pair each" not in g.fix
    assert "not on CPU / gloo" in f.fix  # async TP needs NCCL and symmetric memory


@pytest.mark.parametrize("name", TP)
def test_their_time_is_not_also_exposed_comm(name):
    """The pipeline's sends and receives are its bubble, TP's collectives tp-exposed-comm's: exposed-comm (data
    parallel's rule, with a fix in data parallel's terms) does not claim the same time again."""
    rep = report_of(name)
    assert rep.strategy.kinds and not {"ddp", "fsdp1", "fsdp2"} & set(rep.strategy.kinds)
    assert not findings_of(name, "exposed-comm")
    assert findings_of(name, "pipeline-bubble" if "pp" in rep.strategy.kinds else "tp-exposed-comm")
