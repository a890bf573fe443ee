"""The model-parallel fixtures (fixtures/cpu_strategies: real CPU gloo captures) the pipeline-bubble and
tp-exposed-comm tests read, analyzed once per session."""

from __future__ import annotations

from functools import lru_cache

from strategy_raw import FIXTURES
from analyses import analysis_of

PP = ("pp2_m4", "pp2_m8", "pp4_m4", "pp4_m8", "pp2_gpipe", "pp_1f1b")
TP = ("tp2_replicate", "tp2_rowwise", "tp_4")


@lru_cache(maxsize=None)
def report_of(name: str):
    return analysis_of(FIXTURES / name)


def findings_of(name: str, rule: str):
    """(Finding, its JSON) of ``rule`` in the report of fixture ``name``."""
    rep = report_of(name)
    return [(f, d) for f, d in zip(rep.findings, rep.to_dict()["findings"]) if f.id == rule]


def assert_record_and_fix(name: str, rule: str):
    """``rule`` fires once on fixture ``name``; its JSON evidence is its declared record, its fix that record's
    (fitted to the rank's setup) and not DDP's. Returns the finding's JSON."""
    import msgspec

    from traceinspect.diagnose import get_rule

    (f, d), = findings_of(name, rule)
    r = get_rule(rule)
    record = msgspec.convert(d["evidence"], r.evidence, strict=False)
    assert set(d["evidence"]) <= set(r.evidence.__struct_fields__)
    assert r.fix(record, report_of(name).ranks[0].setup) == f.fix
    assert "DistributedDataParallel" not in f.fix
    return d
