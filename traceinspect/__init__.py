"""traceinspect: where the time of a distributed PyTorch training step goes, and what to change.

The analysis path never imports torch; ``traceinspect.capture`` and ``traceinspect.workload`` do.
"""

__version__ = "0.1.0"

__all__ = ["load", "analyze", "analyze_path", "Config", "__version__"]


_LAZY = {"load": ("load", "load"), "analyze": ("analyze", "analyze"), "analyze_path": ("api", "analyze_path"),
         "Config": ("config", "Config")}


def __getattr__(name):  # lazy: importing the package stays cheap (and works without the analysis deps)
    if name not in _LAZY:
        raise AttributeError(name)
    import importlib

    module, attr = _LAZY[name]
    obj = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
    # Importing the submodule set the package attribute to the module; the API name must be the function.
    globals()[name] = obj
    return obj
