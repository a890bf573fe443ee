"""traceinspect: where the time of a distributed PyTorch training step goes, and what to change.

The analysis path never imports torch; ``traceinspect.capture`` and ``traceinspect.capture.workload`` do.
"""

__version__ = "0.1.0"

__all__ = ["report_folder", "load", "analyze", "analyze_path", "Config", "__version__"]


_LAZY = {"report_folder": ("run", "report_folder"), "load": ("load", None), "analyze": ("analyze", None),
         "analyze_path": ("run.api", "analyze_path"), "Config": ("config", "Config")}


def __getattr__(name):  # lazy: importing the package stays cheap (and works without the analysis deps)
    if name not in _LAZY:
        raise AttributeError(name)
    import importlib

    module, attr = _LAZY[name]
    mod = importlib.import_module(f"{__name__}.{module}")
    # ``load`` and ``analyze`` are stage packages that can be called like the functions they are named after.
    obj = mod if attr is None else getattr(mod, attr)
    globals()[name] = obj
    return obj
