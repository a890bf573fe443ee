"""Per-rank summaries -> Report: the cross-rank stage, then every rule.

Nothing here touches raw events: it runs on the ``RankAnalysis`` summaries the per-rank stage made, wherever that
stage ran (local processes or a Dask cluster). Running the stages and making the report's document are ``run/``'s
(``run/stages.py``): this module hands on a ``Report`` and knows nothing of the document.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from ..analyze.rank import RankAnalysis
from ..analyze.strategy import Strategy, run_strategy
from ..load.trace import Skipped
from ..thresholds import DEFAULT, Thresholds
from .finding import Finding, severity_rank


@dataclass
class Report:
    source: str
    ranks: list[RankAnalysis]
    findings: list[Finding]
    skipped: list[Skipped]
    world_size: int | None
    cross_rank: dict = field(default_factory=dict)
    thresholds: Thresholds = DEFAULT  # what the analysis and the rules read of the settings
    missing_ranks: list[int] = field(default_factory=list)  # ranks the world size promises but no file provided
    errors: list[str] = field(default_factory=list)  # analyses or rules that failed; the rest of the report stands
    # Per-rank claims, projection and verdict (diagnose/accounting.py); empty when the accounting failed.
    accounting: dict = field(default_factory=dict)
    runs: dict | None = None  # the runs, ranks and windows the loader found in the folder (docs/folders.md)
    strategy: Strategy = field(default_factory=Strategy)  # the parallel strategy the ranks show (analyze/strategy.py)

    # Python API conveniences -------------------------------------------------------------------------------
    @property
    def steps(self) -> pd.DataFrame:
        """All ranks' step tables in one DataFrame (column ``rank`` added)."""
        frames = [r.steps.copy().assign(rank=r.rank) for r in self.ranks]  # copy: one block, no fragmentation warning
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    @property
    def findings_frame(self) -> pd.DataFrame:
        return pd.DataFrame([f.to_dict() for f in self.findings])

    def table(self, name: str) -> pd.DataFrame:
        """A per-rank table (e.g. "kernels", "collectives") of all ranks, with a ``rank`` column."""
        frames = [r.tables[name].assign(rank=r.rank) for r in self.ranks if name in r.tables]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def finish(source: str, ranks: list[RankAnalysis], skipped: list[Skipped], world_size: int | None,
           thresholds: Thresholds = DEFAULT, runs: dict | None = None, make: type[Report] = Report) -> Report:
    """The cross-rank stage and the rules, on per-rank summaries only (``runs``: what the loader found), into a
    ``make`` (``Report`` or a subclass: the run's adds the document)."""
    ranks = sorted(ranks, key=lambda r: r.rank)
    skipped = list(skipped)
    ranks, world_size = _drop_other_runs(ranks, skipped, world_size)
    have = {r.rank for r in ranks}
    missing = [r for r in range(world_size or 0) if r not in have]
    report = make(source=source, ranks=ranks, findings=[], skipped=skipped, world_size=world_size,
                  thresholds=thresholds, missing_ranks=missing, errors=[e for r in ranks for e in r.errors], runs=runs,
                  strategy=run_strategy(ranks))
    if len(ranks) > 1:
        from ..analyze.cross_rank import cross_rank_analysis

        try:
            report.cross_rank = cross_rank_analysis(ranks, thresholds)
        except Exception as exc:  # the per-rank findings still stand
            report.errors.append(f"cross-rank analysis failed: {type(exc).__name__}: {exc}")
    from . import all_rules, run_rules

    findings = run_rules(report, thresholds)
    try:
        from .accounting import account

        findings, report.accounting = account(report, findings, thresholds)
    except Exception as exc:  # the findings stand with the rules' own estimates
        report.errors.append(f"accounting failed: {type(exc).__name__}: {exc}")
    order = {m.ID: i for i, m in enumerate(all_rules())}
    findings.sort(key=lambda f: (-severity_rank(f.severity), -(f.time_at_stake_us or 0.0), order.get(f.id, 99)))
    report.findings = findings
    return report


def _drop_other_runs(ranks: list[RankAnalysis], skipped: list[Skipped], world_size):
    """Files from different runs in one folder: keep the ranks that agree with the majority's world size."""
    worlds = [r.world_size for r in ranks if r.world_size]
    if len(set(worlds)) <= 1:
        return ranks, world_size
    majority = max(set(worlds), key=lambda w: (worlds.count(w), w))
    keep = []
    for r in ranks:
        if r.world_size and r.world_size != majority:
            for f in r.files:
                skipped.append(Skipped(file=f, reason=f"from another run: world size {r.world_size}, the others {majority}"))
        else:
            keep.append(r)
    return keep, majority

