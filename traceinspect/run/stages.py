"""The stages run in order, with what each is handed: load (the worker processes and the column cache), the
per-rank analysis (the fan-out of a big rank's analyses), the cross-rank stage and the rules, then the document.

    trace = load("./log/profile_ddp", config)      # traceinspect.load_trace
    report = analyze(trace, config)                # traceinspect.analyze_trace: per-rank, cross-rank, rules
    report.to_dict()                               # the JSON document (report/build.py), as plain dicts

No stage below imports ``run/``: this is where they meet.
"""

from __future__ import annotations

import os
from typing import Iterable

from ..analyze.rank import analyze_ranks
from ..config import DEFAULT, Config
from ..diagnose import engine
from ..load import reader
from ..load.services import ProgressFn
from ..load.trace import Skipped, Trace
from . import services


class Report(engine.Report):
    """The diagnose stage's ``Report`` as the run hands it out, with its document: ``to_dict()`` (the
    ``ReportDoc`` as plain dicts, what every renderer reads)."""

    def to_dict(self) -> dict:
        from ..report.doc import to_dict

        return to_dict(to_doc(self))


def load(path: str | os.PathLike | Iterable, config: Config = DEFAULT, progress: ProgressFn | None = None,
         allow_empty: bool = False, run: int | None = None, rank: int | None = None,
         workers: services.ProcessWorkers | None = None) -> Trace:
    """``load.reader.load`` on this run's worker processes (``workers``, default ``Config.workers``) and column
    cache (``use_cache``)."""
    return reader.load(path, config, progress, allow_empty, run, rank, workers=workers or services.workers(config),
                       cache=services.column_cache(config))


def finish(source: str, ranks: list, skipped: list[Skipped], world_size: int | None, config: Config = DEFAULT,
           runs: dict | None = None) -> Report:
    """The cross-rank stage and the rules (``diagnose.engine.finish``), handed out as a ``Report`` with its document."""
    return engine.finish(source, ranks, skipped, world_size, config, runs, make=Report)


def analyze(trace: Trace, config: Config = DEFAULT) -> Report:
    """Analyze a loaded trace: per-rank stage (a big rank's analyses side by side), cross-rank stage, rules."""
    ranks = analyze_ranks(trace, config, services.rank_fan_out(config))
    return finish(trace.source, ranks, trace.skipped, trace.world_size, config, trace.runs)


def to_doc(report: engine.Report):
    """A ``Report`` -> its ``ReportDoc`` (report/build.py)."""
    from ..report.build import build_doc

    return build_doc(report)
