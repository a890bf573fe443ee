"""The stages run in order, with what each is handed: load (the worker processes, the column cache and the
``Limits``), the per-rank analysis (the fan-out of a big rank's analyses and the ``Thresholds``), the cross-rank
stage and the rules (the ``Thresholds``), then the document.

    trace = load("./log/profile_ddp", config)      # traceinspect.load_trace
    report = analyze(trace, config)                # traceinspect.analyze_trace: per-rank, cross-rank, rules
    report.to_dict()                               # the JSON document (report/build.py), as plain dicts

``load`` and ``analyze`` take a ``Config`` (the API's) and hand each stage its part; ``load_with`` and ``finish``
take the parts. No stage below imports ``run/``: this is where they meet.
"""

from __future__ import annotations

import os
from typing import Iterable

from ..analyze.rank import analyze_ranks
from ..config import DEFAULT, Config, RunOptions
from ..diagnose import engine
from ..load import reader
from ..load.limits import Limits
from ..load.services import ProgressFn
from ..load.trace import Skipped, Trace
from ..thresholds import Thresholds
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
    """``load_with`` the run options and limits of ``config``."""
    return load_with(path, config.options, config.limits, progress, allow_empty, run, rank, workers)


def load_with(path: str | os.PathLike | Iterable, options: RunOptions, limits: Limits,
              progress: ProgressFn | None = None, allow_empty: bool = False, run: int | None = None,
              rank: int | None = None, workers: services.ProcessWorkers | None = None) -> Trace:
    """``load.reader.load`` within ``limits``, on this run's worker processes (``workers``, default
    ``options.workers``) and column cache (``options.use_cache``)."""
    return reader.load(path, limits, progress, allow_empty, run, rank, workers=workers or services.workers(options),
                       cache=services.column_cache(options))


def finish(source: str, ranks: list, skipped: list[Skipped], world_size: int | None, thresholds: Thresholds,
           runs: dict | None = None) -> Report:
    """The cross-rank stage and the rules (``diagnose.engine.finish``), handed out as a ``Report`` with its document."""
    return engine.finish(source, ranks, skipped, world_size, thresholds, runs, make=Report)


def analyze(trace: Trace, config: Config = DEFAULT) -> Report:
    """Analyze a loaded trace: per-rank stage (a big rank's analyses side by side), cross-rank stage, rules."""
    thresholds = config.thresholds
    ranks = analyze_ranks(trace, thresholds, services.rank_fan_out(config.options, config.limits))
    return finish(trace.source, ranks, trace.skipped, trace.world_size, thresholds, trace.runs)


def to_doc(report: engine.Report):
    """A ``Report`` -> its ``ReportDoc`` (report/build.py)."""
    from ..report.build import build_doc

    return build_doc(report)
