"""Nothing is skipped in silence: a rule module that cannot load, a rule whose needs a rank does not meet, an
analysis module that cannot load and a failing cross-rank stage each put a line in the report's ``errors``, and the
rest of the report stands. Real H200 and public traces."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from traceinspect import diagnose
from traceinspect.analyze import rank as rank_mod
from traceinspect.config import Config
from traceinspect.diagnose import Needs, all_rules, missing_needs
from traceinspect.diagnose.engine import finish
from traceinspect.run import report_folder


ROOT = Path(__file__).resolve().parents[2]
BIG = ROOT / "fixtures" / "gpu" / "big_baseline"
NOCACHE = Config(use_cache=False, workers=1)


@functools.lru_cache(maxsize=None)
def _analysis(folder: Path):
    return report_folder(folder, NOCACHE).analysis


def _ids(report) -> list[tuple[str, str]]:
    return [(f.id, f.severity) for f in report.findings]


def test_every_rule_declares_needs_a_real_gpu_rank_meets():
    rep = _analysis(BIG)
    for rule in all_rules():
        assert isinstance(rule.NEEDS, Needs), rule.ID
        assert missing_needs(rule, rep) == [], rule.ID
    assert rep.errors == []


def test_missing_step_column_is_an_error_not_silence():
    rep = _analysis(BIG)
    ra = rep.ranks[0]
    broken = type(ra)(**{**ra.__dict__, "steps": ra.steps.drop(columns=["sync_us"])})
    out = finish(rep.source, [broken], list(rep.skipped), rep.world_size, NOCACHE)
    assert f"rule host-sync cannot run on rank {ra.rank}: missing sync_us" in out.errors
    assert "host-sync" not in {f.id for f in out.findings}
    # The other rules ran as before (their severities may move: host-sync's share of the step is free to claim).
    assert sorted(x[0] for x in _ids(out)) == sorted(x[0] for x in _ids(rep) if x[0] != "host-sync")


def test_missing_table_is_an_error():
    rep = _analysis(BIG)
    ra = rep.ranks[0]
    tables = {k: v for k, v in ra.tables.items() if k != "optimizer"}
    out = finish(rep.source, [type(ra)(**{**ra.__dict__, "tables": tables})], [], rep.world_size, NOCACHE)
    assert any(e.startswith("rule optimizer-not-fused cannot run") and "table optimizer" in e for e in out.errors)


def test_missing_rule_module_is_an_error(monkeypatch):
    rep = _analysis(BIG)
    monkeypatch.setattr(diagnose, "RULE_MODULES", diagnose.RULE_MODULES + ("no_such_rule",))
    out = finish(rep.source, list(rep.ranks), [], rep.world_size, NOCACHE)
    assert any(e.startswith("rule module no_such_rule cannot be loaded") for e in out.errors)
    assert _ids(out) == _ids(rep)


def test_missing_analysis_module_is_an_error_in_the_rank(monkeypatch):
    monkeypatch.setattr(rank_mod, "RANK_EXTENSIONS", rank_mod.RANK_EXTENSIONS + ("no_such_analysis",))
    d = report_folder(BIG, NOCACHE).to_dict()
    assert any("no_such_analysis analysis failed on rank 0" in e and "cannot be loaded" in e
               for e in d["ranks"][0]["errors"])
    assert any("no_such_analysis" in e for e in d["errors"])
    assert d["ranks"][0]["steps"], "the rest of the rank's analysis stands"


def test_failing_cross_rank_stage_is_an_error(monkeypatch, cpu_clean_run):
    rep = report_folder(cpu_clean_run, NOCACHE).analysis
    assert len(rep.ranks) == 2 and rep.cross_rank
    import traceinspect.analyze.cross_rank as cr

    def boom(ranks, config):
        raise RuntimeError("constructed failure")

    monkeypatch.setattr(cr, "cross_rank_analysis", boom)
    out = finish(rep.source, list(rep.ranks), [], rep.world_size, NOCACHE)
    assert "cross-rank analysis failed: RuntimeError: constructed failure" in out.errors
    assert out.cross_rank == {}
    assert {f.id for f in out.findings} >= {f.id for f in rep.findings if f.id != "straggler"}


@pytest.mark.parametrize("cmd", ["capture", "demo", "diff"])
def test_commands_are_registered(cmd):
    from traceinspect.cli.main import cli

    assert cmd in cli.list_commands(None) and cli.get_command(None, cmd).name == cmd
