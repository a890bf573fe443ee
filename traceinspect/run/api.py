"""The Python API: the same calls the CLI makes.

    import traceinspect
    trace = traceinspect.load("./log/profile_ddp")
    report = traceinspect.analyze(trace)
    report.steps        # DataFrame: one row per rank and step
    report.findings     # list of Finding
    report.to_dict()    # the JSON report
"""

from __future__ import annotations

import os

from ..diagnose.engine import Report
from ..config import Config, DEFAULT
from ..load.reader import ProgressFn
from .local import analyze_local


def analyze_path(path: str | os.PathLike, config: Config = DEFAULT, progress: ProgressFn | None = None,
                 executor: str = "local", scheduler: str | None = None, run: int | None = None) -> Report:
    """Load and analyze a folder (or file) of traces: run ``run`` of it (1 the oldest), or the most recent."""
    if executor == "dask":
        from .dask import analyze_with_dask

        return analyze_with_dask(path, config, scheduler=scheduler, progress=progress, run=run)
    if scheduler:
        from ..errors import UsageError

        raise UsageError("--scheduler needs --executor dask")
    return analyze_local(path, config, progress, run=run)
