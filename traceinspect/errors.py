"""The exceptions traceinspect raises for problems a user can fix.

Every error carries a one-line message meant for the terminal; the CLI prints it without a traceback.
"""

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
