"""``traceinspect capture`` and ``traceinspect demo``: record traces of the reference DDP workload.

``capture`` launches :mod:`traceinspect.capture.workload` under torchrun
(``python -m torch.distributed.run --standalone``): one process per rank, gloo on
CPU, NCCL with one GPU per rank. ``demo`` captures the ``baseline`` and
``optimized`` presets and shows, side by side, what the fixes changed.

torch, the workload and the analyzer are imported inside the commands, so that
registering these commands costs nothing, the analyzer runs where torch is not
installed, and capturing runs where only torch, click and rich are (a GPU box
without msgspec/pyarrow): ``python -m traceinspect.cli.capture capture ...``.
"""

from __future__ import annotations

import os
import shutil
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import click

from ..capture import profiling as _capture
from ..errors import UsageError

__all__ = ["capture", "demo", "run_capture", "render_knobs",
           "CaptureFailed", "CPU_DEMO_OVERRIDES", "standalone_main"]

#: Sizes that keep a 2-rank CPU capture to seconds on a 2-core machine; 8 small micro-batches per optimizer step, so
#: the step is mostly what the fixes remove (a gradient all-reduce per micro-batch) rather than matmuls.
CPU_DEMO_OVERRIDES: dict[str, Any] = {"batch_size": 4, "accum_steps": 8}
#: Recorded steps per capture in the CPU demo: CPU steps vary more than GPU steps (two ranks and their loader
#: workers share a few cores), and the diff's noise rule needs a few steps on each side to call a change.
CPU_DEMO_ACTIVE = 8



class CliError(click.ClickException):
    """A one-line user error: printed as ``Error: ...`` with exit code 2, never a traceback."""

    exit_code = 2


class CaptureFailed(RuntimeError):
    """The workload ran but did not produce the traces (message is one line, names the log)."""


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
        on_start(f"{preset}{f' ({model})' if model else ''} on {nproc} "
                 f"{'GPU rank(s) (NCCL)' if cuda else 'CPU rank(s) (gloo)'} into {out}")

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


# --------------------------------------------------------------------------- commands

_schedule_options = [
    click.option("--wait", default=1, show_default=True, help="idle steps before each window"),
    click.option("--warmup", default=1, show_default=True, help="profiled but discarded steps"),
    click.option("--active", default=3, show_default=True, help="recorded steps per window"),
    click.option("--repeat", default=1, show_default=True, help="windows per rank (0 = until the run ends)"),
]


def _with_schedule(f):
    for opt in reversed(_schedule_options):
        f = opt(f)
    return f


@click.command("capture")
@click.option("--preset", type=click.Choice(["baseline", "optimized"]), default="optimized", show_default=True,
              help="baseline = the naive DDP loop; optimized = every fix applied")
@click.option("--nproc", type=int, default=None, help="ranks to launch (default: all GPUs, or 2 on CPU)")
@click.option("--out", default="./log/profile_ddp", show_default=True, help="trace folder")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="override a workload knob (repeatable); see --list-knobs")
@click.option("--model", type=click.Choice(["mlp", "transformer", "deep"]), default=None,
              help="model to train (default: mlp)")
@click.option("--steps", type=int, default=0, help="optimizer steps (default: what the schedule needs + 1)")
@_with_schedule
@click.option("--gzip/--no-gzip", default=True, show_default=True, help="write .json.gz traces")
@click.option("--record-shapes", is_flag=True, help="record operator input shapes (adds overhead)")
@click.option("--profile-memory", is_flag=True, help="record allocations (adds overhead)")
@click.option("--with-stack", is_flag=True, help="record Python stacks (adds a lot of overhead)")
@click.option("--overwrite", is_flag=True, help="replace traces already in --out")
@click.option("--list-knobs", is_flag=True, help="list the --set knobs and exit")
@click.option("-v", "--verbose", is_flag=True, help="show the ranks' output as they run")
def capture(preset, nproc, out, overrides, model, steps, wait, warmup, active, repeat, gzip,
            record_shapes, profile_memory, with_stack, overwrite, list_knobs, verbose):
    """Profile the reference DDP workload under torchrun and write per-rank traces to OUT."""
    if list_knobs:
        from ..capture import workload

        for name, typ, default, comment in workload.knob_table():
            where = " [GPU only]" if name in workload.GPU_ONLY else ""
            click.echo(f"{name:24} {typ:6} {default!r:10} {comment}{where}")
        return
    t0 = time.monotonic()
    try:
        files = run_capture(out, preset=preset, nproc=nproc, overrides=list(overrides), model=model,
                            steps=steps, wait=wait, warmup=warmup, active=active, repeat=repeat,
                            gzip=gzip, record_shapes=record_shapes, profile_memory=profile_memory,
                            with_stack=with_stack, overwrite=overwrite, verbose=verbose,
                            on_start=lambda what: click.echo(f"traceinspect: capturing {what} ...", err=True))
    except CaptureFailed as e:
        raise CliError(str(e)) from None
    ranks = len({p.name.split(".", 1)[0] for p in files})
    click.echo(f"traceinspect: wrote {len(files)} trace file(s) ({ranks} rank(s) x {max(repeat, 1)} "
               f"window(s)) in {time.monotonic() - t0:.1f}s", err=True)
    click.echo(f"next: traceinspect report {out}")


@click.command("demo")
@click.option("--out", default="./log/demo", show_default=True,
              help="folder for the two captures (OUT/baseline, OUT/optimized)")
@click.option("--nproc", type=int, default=None, help="ranks (default: all GPUs, or 2 on CPU)")
@click.option("--model", type=click.Choice(["mlp", "transformer", "deep"]), default=None,
              help="model to train (default: mlp)")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="override a knob in both captures (repeatable)")
@click.option("--report/--no-report", default=True, show_default=True,
              help="analyze and compare the captures (needs the analyzer's dependencies)")
@click.option("-v", "--verbose", is_flag=True, help="show the ranks' output as they run")
def demo(out, nproc, model, overrides, report, verbose):
    """Capture the baseline and the optimized DDP step and show what each fix changed."""
    from ..capture import workload

    try:
        knobs: dict[str, Any] = workload.parse_overrides(list(overrides))
        for preset in ("baseline", "optimized"):  # check before the first capture starts
            workload.apply_overrides(workload.preset_config(preset, cuda=False),
                                     {**knobs, **({"model": model} if model else {})})
    except workload.KnobError as e:
        raise CliError(str(e)) from None
    torch = _import_torch()
    cuda = torch.cuda.is_available()
    if not cuda:  # CPU-friendly sizes unless the user chose their own
        knobs = {**CPU_DEMO_OVERRIDES, **knobs}
    root = Path(out)
    folders: dict[str, Path] = {}
    busy = _busy_note()  # before our own ranks add to the load
    for preset in ("baseline", "optimized"):
        folder = root / preset
        t0 = time.monotonic()
        try:
            run_capture(folder, preset=preset, nproc=nproc, overrides=knobs, model=model,
                        overwrite=True, verbose=verbose, active=3 if cuda else CPU_DEMO_ACTIVE,
                        on_start=lambda what: click.echo(f"traceinspect: capturing {what} ...", err=True))
        except CaptureFailed as e:
            raise CliError(str(e)) from None
        click.echo(f"traceinspect: {preset} captured in {time.monotonic() - t0:.1f}s", err=True)
        folders[preset] = folder
    if not report:
        click.echo(f"next: traceinspect report {folders['baseline']}; traceinspect report {folders['optimized']}")
        return
    try:
        from .._optional import require
        from ..run import ANALYSIS_STACK, report_folder

        require(ANALYSIS_STACK, "the demo's comparison")
    except UsageError as e:
        raise CliError(f"captured into {root}, but the analyzer cannot load ({e}); run "
                       f"`traceinspect report {folders['baseline']}` where traceinspect is fully installed") from None
    from ..render.diff_text import render_diff_text
    from ..report.diff import diff_reports

    reports = {name: report_folder(str(folder)).to_dict() for name, folder in folders.items()}
    knob_diff = _knob_diff(_workload_settings(folders["baseline"]), _workload_settings(folders["optimized"]))
    width = shutil.get_terminal_size((120, 40)).columns
    from rich.console import Console

    render_knobs(knob_diff, console=Console(width=max(width, 100)), cuda=cuda)
    click.echo(render_diff_text(diff_reports(reports["baseline"], reports["optimized"]), width=max(width, 100)),
               nl=False)
    click.echo(f"details: traceinspect report {folders['baseline']}   |   "
               f"traceinspect report {folders['optimized']}")
    if busy and not cuda:
        click.echo(busy, err=True)


def _busy_note(sample_s: float = 0.5) -> str | None:
    """A warning when other work keeps this machine's cores busy (measured over ``sample_s`` from /proc/stat): a
    CPU-bound step then gets only its fair share of a core while a waiting one (the baseline's all-reduces) does
    not lose it, so the comparison is noisier. None on a quiet machine or where /proc/stat is missing."""
    def ticks() -> tuple[int, int]:
        with open("/proc/stat") as f:
            vals = [int(x) for x in f.readline().split()[1:]]
        idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
        return sum(vals), idle

    try:
        t0, i0 = ticks()
        time.sleep(sample_s)
        t1, i1 = ticks()
    except (OSError, ValueError, IndexError):
        return None
    busy = 1.0 - (i1 - i0) / max(t1 - t0, 1)
    if busy <= 0.5:
        return None
    return (f"traceinspect: note: other work kept this machine's cores {100 * busy:.0f} % busy just before the "
            "captures: CPU timings vary more than on a quiet machine")


# --------------------------------------------------------------------------- comparison


def _workload_settings(folder: Path) -> dict[str, Any]:
    """The workload config a capture really ran with, read back from its trace metadata.

    Reading the trace (not recomputing the preset here) shows the values the
    ranks resolved on their device: worker counts, auto batch size, pinning.
    """
    import gzip
    import json

    for path in _trace_files(folder):
        opener = gzip.open if path.name.endswith(".gz") else open
        try:
            with opener(path, "rt") as fh:
                meta = json.load(fh).get(_capture.METADATA_KEY) or {}
        except (OSError, ValueError):
            continue
        return dict(meta.get("workload") or {})
    return {}


def _knob_diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(knob, baseline value, optimized value) for every workload knob that differs."""
    from ..capture import workload

    skip = {"preset"}
    names = [f for f in workload.WorkloadConfig.__dataclass_fields__ if f not in skip]
    return [(k, before.get(k), after.get(k)) for k in names if before.get(k) != after.get(k)]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def render_knobs(knob_diff: list[tuple[str, Any, Any]], console: Any = None, cuda: bool | None = None) -> None:
    """The knobs the optimized preset changes, where each applies and what it buys, as a rich table (the numbers
    follow from ``traceinspect diff``). ``cuda=False`` adds the GPU-only fixes this CPU run leaves off."""
    from rich.console import Console
    from rich.table import Table

    from ..capture import workload

    console = console or Console()
    if not knob_diff:
        return
    t = Table(title="What the optimized preset changes", title_justify="left")
    for col in ("knob", "baseline", "optimized", "applies on", "why"):
        t.add_column(col)
    for name, before, after in knob_diff:
        t.add_row(name, str(before), str(after), workload.applies_on(name), workload.WHY.get(name, ""))
    console.print(t)
    if cuda is False:
        off = ", ".join(workload.GPU_ONLY)
        console.print(f"GPU-only fixes, left as in the baseline on this CPU run: {off} "
                      "(the optimized preset turns them on where CUDA is).")


@click.group()
def standalone_main() -> None:
    """traceinspect capture commands (for machines with torch but without the analyzer)."""


standalone_main.add_command(capture)
standalone_main.add_command(demo)

if __name__ == "__main__":
    standalone_main()
