"""traceinspect: where the time of a distributed PyTorch training step goes, and what to change.

The analysis path never imports torch; ``traceinspect.capture`` and ``traceinspect.capture.workload`` do.

The Python API is plain functions (``run/api.py``), imported on first use so that importing the package stays
cheap (and works without the analysis dependencies):

    report_doc(path, config)      -> ReportDoc: the typed report (the JSON contract, report/doc.py)
    report_folder(path, config)   -> FolderReport: the document and the live analysis behind it (the CLI's call)
    load_trace(path, config)      -> Trace: per-rank columnar events
    analyze_trace(trace, config)  -> Report: the live analysis (DataFrames per rank, findings); ``.to_dict()``
    analyze_path(path, config)    -> Report: ``load_trace`` then ``analyze_trace`` (run N of the folder: ``run=N``)
"""

__version__ = "0.1.0"

__all__ = ["report_doc", "report_folder", "load_trace", "analyze_trace", "analyze_path", "Config", "__version__"]

_LAZY = {"report_doc": "run.api", "report_folder": "run", "load_trace": "run.api", "analyze_trace": "run.api",
         "analyze_path": "run.api", "Config": "config"}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)


def __dir__():
    return sorted([*globals(), *_LAZY])
