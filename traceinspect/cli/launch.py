"""Launching the reference DDP workload under torchrun and checking what it wrote: :func:`run_capture`, used by
``traceinspect capture`` and ``traceinspect demo``.

torch is looked for, never imported at module level, and nothing of the analyzer is imported here, so capturing
runs where only torch, click and rich are installed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import click

from ..capture import profiling as _capture
from ..errors import CaptureFailed  # noqa: F401  (re-exported for demo and capture)


class CliError(click.ClickException):
    """A one-line user error: printed as ``Error: ...`` with exit code 2, never a traceback."""

    exit_code = 2


# --------------------------------------------------------------------------- launching


def _import_torch():
    from .._optional import MissingDependency, import_optional

    try:
        return import_optional("torch", "capturing traces")
    except MissingDependency as e:
        raise CliError(str(e)) from None


def _package_root() -> Path:
    """The folder holding the ``traceinspect`` package, so torchrun's children import this same code."""
    return Path(__file__).resolve().parents[2]


def _trace_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("rank*.pt.trace.json*") if p.is_file())


def _child_env(nproc: int) -> dict[str, str]:
    env = dict(os.environ)
    root = str(_package_root())
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    if "OMP_NUM_THREADS" not in env:  # torchrun would set 1 and print a banner about it
        try:
            cpus = len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover
            cpus = os.cpu_count() or 1
        env["OMP_NUM_THREADS"] = str(max(1, cpus // max(1, nproc)))
    return env


_ERROR_LINE = re.compile(r"^(?:\[rank\d+\]:\s*)?([A-Za-z_][\w.]*(?:Error|Exception|Exit)): (.+)$")


def _failure_reason(log_text: str) -> str:
    """The root cause in a failed torchrun log, as one line.

    Our workload prints ``traceinspect: error (rank r): ...`` for known errors;
    otherwise the first ``SomeError: message`` line of a worker traceback is the
    cause (torchrun's own ChildFailedError summary only says that a child died).
    """
    for line in log_text.splitlines():
        if line.startswith("traceinspect: error"):
            return re.sub(r"^traceinspect: error \(rank \d+\): ", "", line).strip()
    for line in log_text.splitlines():
        m = _ERROR_LINE.match(line.strip())
        if m and "ChildFailedError" not in m.group(1):
            return f"{m.group(1).rsplit('.', 1)[-1]}: {m.group(2).strip()}"
    for line in log_text.splitlines():
        if "exitcode" in line and "Signal" not in line:
            return line.strip()
    return ""


def run_capture(out: str | os.PathLike, *, preset: str = "optimized", nproc: int | None = 2,
                overrides: Mapping[str, Any] | Iterable[str] = (), model: str | None = None,
                steps: int = 0, wait: int = 1, warmup: int = 1, active: int = 3, repeat: int = 1,
                skip_first: int = 0, gzip: bool = True, record_shapes: bool = False,
                profile_memory: bool = False, with_stack: bool = False, overwrite: bool = False,
                verbose: bool = False, timeout: float | None = None,
                on_start: Callable[[str], None] | None = None) -> list[Path]:
    """Capture the workload with torchrun into ``out``; returns the trace files written.

    ``overrides`` is a dict of knob values or ``key=value`` strings; ``nproc=None``
    means one rank per GPU, or 2 on CPU. Every argument is checked before torch
    is imported or a process started (raising :class:`CliError`), so a typo costs
    nothing; raises :class:`CaptureFailed` when the ranks fail. ``on_start`` gets
    a one-line description of the launch (ranks, device, backend) just before it.
    """
    from ..capture import workload

    if nproc is not None and nproc < 1:
        raise CliError(f"--nproc must be >= 1 (got {nproc})")
    pairs = ([f"{k}={v}" for k, v in overrides.items()] if isinstance(overrides, Mapping)
             else [str(p) for p in overrides])
    try:
        workload.config_from_args(preset, pairs, model, cuda=False)  # validate knobs without torch
        need = _capture.required_steps(wait, warmup, active, repeat, skip_first)
    except (workload.KnobError, _capture.CaptureError) as e:
        raise CliError(str(e)) from None
    if steps < 0:
        raise CliError(f"--steps must be >= 0 (got {steps})")
    if steps and steps < need:
        raise CliError(f"--steps {steps} is too few: the profiler schedule (skip_first={skip_first}, "
                       f"wait={wait}, warmup={warmup}, active={active}, repeat={repeat}) needs {need} "
                       f"steps, so no trace would be written")
    out = Path(out)
    try:
        _capture._check_writable(out)
    except _capture.CaptureError as e:
        raise CliError(str(e)) from None
    old = _trace_files(out)
    if old and not overwrite:
        raise CliError(f"{out} already holds {len(old)} trace file(s) from an earlier capture; "
                       "pass --overwrite to replace them or choose another --out")

    torch = _import_torch()
    cuda = torch.cuda.is_available()
    gpus = torch.cuda.device_count() if cuda else 0
    if nproc is None:
        nproc = gpus if cuda else 2
    if cuda and nproc > gpus:
        raise CliError(f"--nproc {nproc} needs {nproc} GPUs; this machine has {gpus} "
                       "(NCCL needs one GPU per rank)")
    for path in old:
        path.unlink()
    if on_start is not None:
        on_start(f"{preset}{f' ({model})' if model else ''} ({nproc} {'GPU' if cuda else 'CPU'} ranks, "
                 f"{'NCCL' if cuda else 'gloo'}) into {out}")

    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
           "-m", "traceinspect.capture.workload", "--preset", preset, "--out", str(out),
           "--steps", str(steps), "--wait", str(wait), "--warmup", str(warmup), "--active", str(active),
           "--repeat", str(repeat), "--skip-first", str(skip_first)]
    for pair in pairs:
        cmd += ["--set", pair]
    if model:
        cmd += ["--model", model]
    if not gzip:
        cmd.append("--no-gzip")
    for flag, on in (("--record-shapes", record_shapes), ("--profile-memory", profile_memory),
                     ("--with-stack", with_stack)):
        if on:
            cmd.append(flag)

    env = _child_env(nproc)
    fd, log_name = tempfile.mkstemp(prefix="traceinspect-capture-", suffix=".log")
    try:
        with os.fdopen(fd, "w") as log:
            log.write(" ".join(cmd) + "\n")
            log.flush()
            if verbose:
                proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, errors="replace")
                assert proc.stdout is not None
                for line in proc.stdout:  # tee: live output and a log for the error message
                    sys.stderr.write(line)
                    log.write(line)
                rc = proc.wait(timeout=timeout)
            else:
                rc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        raise CaptureFailed(f"the capture took longer than {timeout:.0f}s and was stopped; log: {log_name}") from None
    files = _trace_files(out)
    expected = nproc * max(repeat, 1)
    if rc != 0 or len(files) < expected:
        text = Path(log_name).read_text(errors="replace")
        reason = _failure_reason(text) or f"torchrun exited with code {rc}"
        got = f"{len(files)} of {expected} trace files written"
        raise CaptureFailed(f"capture failed ({got}): {reason}; full log: {log_name}")
    os.unlink(log_name)
    return files
