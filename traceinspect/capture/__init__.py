"""The torch side: profile a training loop (``profiling``, with what it records about the job in ``metadata``) and
the reference DDP workload (``workload``: its knobs in ``knobs``, data and model in ``models``).

Imports nothing of the analysis path; ``traceinspect.capture.profile(...)`` is :func:`profiling.profile`.
"""

from .profiling import *  # noqa: F401,F403  (the public capture API)
from .profiling import __all__  # noqa: F401
