"""Stage 2, analyze: a per-rank ``Trace`` -> small per-rank tables and step columns (pure functions, no I/O).

``rank`` runs the per-rank stage; ``attribution``/``timeline`` split each step's time; ``collectives``,
``buckets`` and ``cross_rank`` cover communication; ``precision``, ``optimizer`` and ``utilization`` the rest.
``traceinspect.analyze(trace)`` runs this stage, then diagnose (:func:`traceinspect.diagnose.engine.analyze`).
"""

import sys
import types


class _CallableStage(types.ModuleType):
    """The package stays callable as the function it is named after (``traceinspect.analyze(trace)``)."""

    def __call__(self, *args, **kwargs):
        from ..diagnose.engine import analyze

        return analyze(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableStage
