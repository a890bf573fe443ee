"""Stage 1, load: trace files -> a columnar per-rank ``Trace``.

``discover`` finds the files, ``decode`` turns a file (or a piece of one) into typed columns (``columns`` makes
the numpy columns of decoded events; ``prefetch`` starts a big file's pieces before the analysis stack is
imported), ``reader`` puts the pieces together per rank, ``trace`` holds the types. ``traceinspect.load(path)``
calls :func:`reader.load`.
"""

import sys
import types


class _CallableStage(types.ModuleType):
    """The package stays callable as the function it is named after (``traceinspect.load(path)``)."""

    def __call__(self, *args, **kwargs):
        from .reader import load

        return load(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableStage
