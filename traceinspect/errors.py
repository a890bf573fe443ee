"""The one exception tree: every problem traceinspect reports to a user, capture's included.

    TraceInspectError            a problem a user can fix, reported in one line (CLI exit code 2, no traceback)
    ├── TraceFileError           one trace file cannot be used; the report goes on without it (a ``Skipped``)
    ├── NoUsableTraceError       a folder holds no trace that could be analyzed
    ├── UsageError               a command was asked for something it cannot do (bad option, unknown rule id...)
    │   └── MissingDependency    a module a command needs is not installed (the message says how to install it)
    │   └── KnobError            a workload ``--set key=value`` that names no knob or has a bad value; a ValueError
    ├── CaptureError             a capture was set up or used wrongly (schedule, trace folder); also a ValueError
    └── CaptureFailed            the workload ran but did not produce the traces (names its log); also a RuntimeError

Every error carries a one-line message meant for the terminal. This module imports only the standard library:
``traceinspect.capture`` (the torch side) imports it and nothing else of the analysis.
"""

from __future__ import annotations

#: The command line's exit codes: ok; a finding reached ``--fail-on``; a usage or input error (one line); an
#: internal error (a bug: one line, and the file the full traceback was saved to).
EXIT_OK, EXIT_FINDING, EXIT_INPUT, EXIT_INTERNAL = 0, 1, 2, 3


class TraceInspectError(Exception):
    """Base class: a problem with the user's input or request, reported in one line."""

    exit_code = EXIT_INPUT


class TraceFileError(TraceInspectError):
    """One trace file cannot be used (truncated, not JSON, no events...). The report goes on without it."""

    def __init__(self, path, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")

    def __reduce__(self):  # crosses process boundaries (decoding runs in worker processes)
        return (TraceFileError, (self.path, self.reason))


class NoUsableTraceError(TraceInspectError):
    """A folder holds no trace that could be analyzed."""


class UsageError(TraceInspectError):
    """A command was asked for something it cannot do (bad option, unknown rule id...)."""


# The install command per top-level module (an extra of traceinspect where there is one).
INSTALL = {
    "torch": "pip install 'traceinspect[capture]'",
    "dask": "pip install 'traceinspect[dask]'",
    "distributed": "pip install 'traceinspect[dask]'",
    "tensorboard": "pip install 'traceinspect[tensorboard]'",
    "nbclient": "pip install 'traceinspect[notebook]'",
    "jsonschema": "pip install 'traceinspect[test]'",
}


class MissingDependency(UsageError):
    """A module a command needs is not installed (exit 2, one line with the install command)."""

    def __init__(self, module: str, purpose: str):
        top = module.split(".")[0]
        self.module = module
        super().__init__(f"{purpose} needs {top}, which is not installed: "
                         f"{INSTALL.get(top, f'pip install {top}')}")


class KnobError(UsageError, ValueError):
    """A ``--set key=value`` that names no knob, has the wrong type, or an invalid value."""


class CaptureError(TraceInspectError, ValueError):
    """A capture was set up or used wrongly; the message is one line meant for the user."""


class CaptureFailed(TraceInspectError, RuntimeError):
    """The workload ran but did not produce the traces (message is one line, names the log)."""
