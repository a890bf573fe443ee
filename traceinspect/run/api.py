"""The Python API: the same call the CLI makes (``report_folder``), and the live analysis behind it.

    import traceinspect
    result = traceinspect.report_folder("./log/profile_ddp")
    result.to_dict()     # the JSON report (cached: a second call on an unchanged folder reads no trace)
    report = result.analysis
    report.steps         # DataFrame: one row per rank and step
    report.findings      # list of Finding

    trace = traceinspect.load("./log/profile_ddp")    # or stage by stage
    report = traceinspect.analyze(trace)
"""

from __future__ import annotations

import os
from dataclasses import replace

from ..config import DEFAULT, Config
from ..load.services import ProgressFn
from . import Observer, report_folder
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
