"""The profiler schedule and the trace folder, checked before the loop runs (one-line errors, not torch's asserts)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from ..errors import CaptureError  # noqa: F401  (the error tree's; raised here, re-exported by profiling)


# --------------------------------------------------------------------------- schedule


def _check_schedule(wait: int, warmup: int, active: int, repeat: int, skip_first: int) -> None:
    """Reject schedules torch would reject with an AssertionError (or accept and never record)."""
    for name, value in (("wait", wait), ("warmup", warmup), ("active", active),
                        ("repeat", repeat), ("skip_first", skip_first)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise CaptureError(f"{name} must be an integer (got {value!r})")
        if value < 0:
            raise CaptureError(f"{name} must be >= 0 (got {value})")
    if active < 1:
        raise CaptureError(
            f"active must be >= 1 (got {active}): the profiler records only the active steps, "
            "so active=0 would write no trace"
        )


def required_steps(wait: int = 1, warmup: int = 1, active: int = 3, repeat: int = 1,
                   skip_first: int = 0) -> int:
    """Number of ``prof.step()`` calls the loop must make for every trace window to be written.

    torch's schedule runs ``skip_first`` idle steps, then ``repeat`` cycles of
    ``wait`` + ``warmup`` + ``active`` steps; a window's file is written by the
    ``step()`` call that ends its last active step. ``repeat=0`` means "cycle until
    the loop ends", for which one complete cycle is the minimum.

    >>> required_steps(wait=1, warmup=1, active=3)
    5
    >>> required_steps(wait=1, warmup=1, active=3, repeat=2, skip_first=2)
    12
    """
    _check_schedule(wait, warmup, active, repeat, skip_first)
    return skip_first + (wait + warmup + active) * max(repeat, 1)


def recorded_step_numbers(wait: int = 1, warmup: int = 1, active: int = 3, repeat: int = 1,
                          skip_first: int = 0) -> list[list[int]]:
    """The ``ProfilerStep#N`` numbers each trace window holds, one list per window.

    With ``wait=1, warmup=1, active=3`` the single window holds steps 2, 3 and 4
    (steps count from 0). ``repeat=0`` returns the first window only.

    >>> recorded_step_numbers(1, 1, 3, repeat=2)
    [[2, 3, 4], [7, 8, 9]]
    """
    _check_schedule(wait, warmup, active, repeat, skip_first)
    cycle = wait + warmup + active
    return [[skip_first + c * cycle + wait + warmup + i for i in range(active)]
            for c in range(max(repeat, 1))]


# --------------------------------------------------------------------------- the folder


def _check_writable(out_dir: Path) -> None:
    """Create ``out_dir`` and prove a file can be written there, now rather than at step N."""
    if out_dir.exists() and not out_dir.is_dir():
        raise CaptureError(f"the trace folder {out_dir} exists and is not a folder")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CaptureError(f"cannot create the trace folder {out_dir}: {e.strerror or e}") from None
    try:
        with tempfile.NamedTemporaryFile(dir=out_dir, prefix=".traceinspect-write-test-"):
            pass
    except OSError as e:
        raise CaptureError(f"cannot write to the trace folder {out_dir}: {e.strerror or e}") from None
