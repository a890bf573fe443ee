"""Orchestration: ``report_folder`` runs the stages over a folder; the one entry for the CLI (``report``, ``diff``,
``demo``), the Python API and the notebook.

    from traceinspect.run import report_folder
    result = report_folder("./log/profile_ddp", Config())
    result.doc          # ReportDoc: the JSON contract (report/doc.py)
    result.to_dict()    # the same as plain dicts, what every renderer reads
    result.analysis     # the live analysis (DataFrames per rank: .steps, .table("kernels"), .findings)

The stages below never import ``run/``: the worker processes and the column cache are handed in
(``run/services.py``), the stages run in order in ``run/stages.py``.

The whole report is cached (``run/cache.py``: user cache folder, data only), keyed before anything is read by
every trace file's path, size and mtime, the settings and the code. A hit returns the document without importing
numpy or pandas; ``result.analysis`` then runs the analysis on first use (its ranks come from the rank cache).
Where the per-rank stage runs: ``local`` (``run/local.py``, process pools from ``run/pool.py``) or ``dask``
(``run/dask.py``), by ``RunOptions.executor``. ``report_folder`` takes a ``Config`` and hands on its parts: the run
options here, the ``Limits`` to the load stage, the ``Thresholds`` to the analysis, the rules and the document.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..config import DEFAULT, Config, RunOptions
from ..load.limits import Limits
from ..thresholds import Thresholds


class Observer:
    """What a run tells its caller. The default ignores everything; the CLI's progress bar overrides it."""

    def begin(self, files: list[Path], total_bytes: int) -> None:
        """Before decoding: the trace files found and their total size."""

    def decoded(self, path: str, nbytes: int, total: int = 0) -> None:
        """``nbytes`` more of ``path`` decoded (the loaders' ``ProgressFn``)."""

    def end(self, from_cache: bool) -> None:
        """The document is ready (``from_cache``: the whole report came from the cache)."""


@dataclass
class FolderReport:
    """The result of ``report_folder``: the document, and the live analysis behind it (made on demand)."""

    doc: object  # report.doc.ReportDoc
    from_cache: bool
    path: str
    config: Config
    _analysis: object = field(default=None, repr=False)
    _listing: object = field(default=None, repr=False)  # load.discover.Listing: the folder as the report listed it

    def to_dict(self) -> dict:
        from ..report.doc import to_dict

        return to_dict(self.doc)

    @property
    def analysis(self):
        """The ``diagnose.engine.Report`` (per-rank DataFrames); analysed now if the document came from the cache."""
        if self._analysis is None:
            c = self.config
            self._analysis = _analyze(self._listing, c.options, c.limits, c.thresholds, None)
        return self._analysis


def report_folder(path: str | os.PathLike, config: Config = DEFAULT, observer: Observer | None = None) -> FolderReport:
    """Load, analyze and diagnose the traces under ``path`` (a folder or one file) into a report.

    Raises ``NoUsableTraceError`` (nothing to analyse) or ``UsageError`` (bad options); unusable files are listed
    in the report's ``skipped``, failed analyses and rules in its ``errors``.
    """
    from . import cache
    from ..load.discover import list_traces  # standard library only: the cached path imports no pandas

    observer = observer or Observer()
    options = cache.checked(config.options, path)  # a refused cache folder: one line, and the report runs without it
    config = replace(config, use_cache=options.use_cache)
    limits, thresholds = config.limits, config.thresholds
    listing = list_traces(path)  # the one listing of the folder: the key, the pieces started early, the plan
    try:
        files = list(listing.files)
        total = sum(f.stat().st_size for f in files)
    except OSError:  # a file gone since it was listed: no key (the plan says what became of it)
        files, total = [], 0
    # The key is taken once, before the analysis reads the files: a file changed meanwhile is a miss next time.
    key = cache.result_key("report", files, thresholds, limits, options.run) if files and options.use_cache else None
    doc = cache.get_report(key, options)
    if doc is not None:
        observer.end(True)
        return FolderReport(doc=doc, from_cache=True, path=str(path), config=config, _listing=listing)
    observer.begin(files, total)
    live = _analyze(listing, options, limits, thresholds, observer)
    doc = to_doc(live)
    cache.put_report(key, doc, options)
    observer.end(False)
    return FolderReport(doc=doc, from_cache=False, path=str(path), config=config, _analysis=live, _listing=listing)


def to_doc(live):
    """A live ``Report`` -> its ``ReportDoc`` (``run/stages.py``)."""
    from .stages import to_doc as build

    return build(live)


# What analysing traces imports (a cached or saved report needs none of it).
ANALYSIS_STACK = ("numpy", "pandas", "pyarrow")


def _analyze(listing, options: RunOptions, limits: Limits, thresholds: Thresholds, observer: Observer | None):
    """The analysis of the ``listing`` (``load.discover.Listing``) on the executor ``options`` name."""
    from .._optional import require
    from . import pool, services

    # A big trace's pieces decode in workers while the analysis stack is imported; the loader collects them from
    # the workers handed on (``Workers.started``).
    with pool.ordinary_pages(), services.started(listing.files, options, limits) as pre:
        require(ANALYSIS_STACK, "analysing traces")
        workers = replace(services.workers(options), started=pre)
        return _analyze_with(listing, options, limits, thresholds, observer, workers)


def _analyze_with(listing, options: RunOptions, limits: Limits, thresholds: Thresholds, observer: Observer | None,
                  workers=None):
    progress = observer.decoded if observer is not None else None
    if options.executor == "dask":
        from .dask import analyze_with_dask

        return analyze_with_dask(listing, options, limits, thresholds, progress=progress)
    if options.scheduler:
        from ..errors import UsageError

        raise UsageError("--scheduler needs --executor dask")
    from .local import analyze_local

    return analyze_local(listing, options, limits, thresholds, progress, workers=workers)
