"""The Python API: plain functions that return the typed report, or the live analysis behind it.

    import traceinspect
    doc = traceinspect.report_doc("./log/profile_ddp")       # ReportDoc (cached: a second call reads no trace)
    result = traceinspect.report_folder("./log/profile_ddp")  # the document and the live analysis behind it
    report = result.analysis
    report.steps         # DataFrame: one row per rank and step
    report.findings      # list of Finding

    trace = traceinspect.load_trace("./log/profile_ddp")      # or stage by stage
    report = traceinspect.analyze_trace(trace)

Each takes a ``Config`` (every setting; ``config.py``) and hands each stage its part of it (``run/stages.py``).
"""

from __future__ import annotations

import os
from dataclasses import replace

from ..config import DEFAULT, Config
from ..load.services import ProgressFn
from . import Observer, report_folder
from . import stages
from .stages import Report


class _Progress(Observer):
    def __init__(self, fn: ProgressFn):
        self.fn = fn

    def decoded(self, path: str, nbytes: int, total: int = 0) -> None:
        self.fn(path, nbytes, total)


def analyze_path(path: str | os.PathLike, config: Config = DEFAULT, progress: ProgressFn | None = None,
                 executor: str = "local", scheduler: str | None = None, run: int | None = None) -> Report:
    """Load and analyze a folder (or file) of traces: ``report_folder(...).analysis``; run ``run`` of the folder
    (1 the oldest), or the most recent."""
    config = replace(config, executor=executor, scheduler=scheduler, run=run)
    return report_folder(path, config, _Progress(progress) if progress else None).analysis


def report_doc(path: str | os.PathLike, config: Config = DEFAULT):
    """The report of the traces under ``path`` as its typed document (``report.doc.ReportDoc``): what
    ``traceinspect report --json`` writes, read from the cache when the folder is unchanged."""
    return report_folder(path, config).doc


def load_trace(path: str | os.PathLike, config: Config = DEFAULT, progress: ProgressFn | None = None,
               run: int | None = None):
    """The traces under ``path`` (run ``run`` of the folder, 1 the oldest; default the most recent) as a ``Trace``:
    per-rank columnar events, decoded on the config's workers."""
    return stages.load(path, config, progress, run=run)


def analyze_trace(trace, config: Config = DEFAULT) -> Report:
    """A loaded ``Trace`` analysed: per-rank stage, cross-rank stage, rules (no cache)."""
    return stages.analyze(trace, config)
