"""traceinspect: where the time of a distributed PyTorch training step goes, and what to change.

The analysis path never imports torch; ``traceinspect.capture`` and ``traceinspect.capture.workload`` do.

``traceinspect.load(path)`` and ``traceinspect.analyze(trace)`` are the API's stage-by-stage calls, and ``load``
and ``analyze`` are also the names of the stage packages. The packages know no later stage, so this facade makes
the two package modules callable: ``load(...)`` runs ``run.stages.load``, ``analyze(...)`` ``run.stages.analyze``
(with the run's worker processes and cache handed in).
"""

import sys as _sys
import types as _types

__version__ = "0.1.0"

__all__ = ["report_folder", "load", "analyze", "analyze_path", "Config", "__version__"]


class _StageCall(_types.ModuleType):
    """A stage package that can be called as the API function of the same name (``run/stages.py``)."""

    def __call__(self, *args, **kwargs):
        from .run import stages

        return getattr(stages, self.__name__.rsplit(".", 1)[-1])(*args, **kwargs)


from . import analyze, load  # noqa: E402  (standard library only: each package's __init__ is its docstring)

for _stage in (analyze, load):
    _sys.modules[_stage.__name__].__class__ = _StageCall

_LAZY = {"report_folder": ("run", "report_folder"), "analyze_path": ("run.api", "analyze_path"),
         "Config": ("config", "Config")}


def __getattr__(name):  # lazy: importing the package stays cheap (and works without the analysis deps)
    if name not in _LAZY:
        raise AttributeError(name)
    import importlib

    module, attr = _LAZY[name]
    obj = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
    globals()[name] = obj
    return obj
