"""The torch side: profile a training loop (``profiling``) and the reference DDP workload (``workload``).

Imports nothing of the analysis path; ``traceinspect.capture.profile(...)`` is :func:`profiling.profile`.
"""

from .profiling import *  # noqa: F401,F403  (the public capture API)
from .profiling import __all__  # noqa: F401
