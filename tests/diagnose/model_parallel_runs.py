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
