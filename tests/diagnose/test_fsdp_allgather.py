"""fsdp-exposed-allgather on the real CPU (gloo) FSDP2 captures of fixtures/cpu_strategies: its evidence splits the
forward and backward all-gathers (resharding after forward gathers again in backward), and its JSON evidence is the
declared record with the declared fix. Its claim against the measured saving of its knobs: test_fsdp_pairs.py."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import msgspec

from traceinspect.diagnose import get_rule
from analyses import analysis_of, doc_of

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "cpu_strategies"
RULE = "fsdp-exposed-allgather"


@lru_cache(maxsize=None)
def _doc(name: str) -> dict:
    return doc_of(FIXTURES / name)


def test_evidence_splits_forward_and_backward():
    """Resharding after forward gathers again in backward: 4 backward all-gathers per step there, none without."""
    ev = next(f["evidence"] for f in _doc("fsdp2_2")["findings"] if f["id"] == RULE)["per_rank"][0]
    assert ev["allgathers_per_step"] == 8 and ev["backward_allgather_exposed_us_per_step"] > 0
    assert ev["reshard_after_forward"] is True and ev["forward_prefetch_seen"] is False
    ev2 = next(f["evidence"] for f in _doc("fsdp2_noreshard")["findings"] if f["id"] == RULE)["per_rank"][0]
    assert ev2["allgathers_per_step"] == 4 and ev2["backward_allgather_exposed_us_per_step"] == 0
    assert ev2["reduce_scatter_after_backward_exposed_us_per_step"] > 0


def test_the_evidence_json_is_the_record():
    """The JSON evidence is the declared record, and the fix is the declared fix of it (fitted to the setup)."""
    rule = get_rule(RULE)
    rep = analysis_of(FIXTURES / "fsdp2_2")
    setups = {ra.rank: ra.setup for ra in rep.ranks}
    got = [(f, d) for f, d in zip(rep.findings, rep.to_dict()["findings"]) if f.id == RULE]
    assert got
    for f, d in got:
        record = msgspec.convert(d["evidence"], rule.evidence, strict=False)
        assert set(d["evidence"]) <= set(rule.evidence.__struct_fields__)
        assert rule.fix(record, setups.get(d["ranks"][0])) == f.fix
