"""``traceinspect demo``: capture the ``baseline`` and ``optimized`` presets and show, side by side, what the
fixes changed (the knobs each preset sets, read back from the traces, then ``traceinspect diff``).

The analyzer is imported inside the command, so the demo still captures where only torch, click and rich are.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, Mapping

import click

from ..capture import profiling as _capture
from ..errors import UsageError
from .launch import CaptureFailed, CliError, _import_torch, _trace_files, run_capture

#: Sizes that keep a 2-rank CPU capture to seconds on a 2-core machine; 8 small micro-batches per optimizer step, so
#: the step is mostly what the fixes remove (a gradient all-reduce per micro-batch) rather than matmuls.
CPU_DEMO_OVERRIDES: dict[str, Any] = {"batch_size": 4, "accum_steps": 8}
#: Recorded steps per capture in the CPU demo: CPU steps vary more than GPU steps (two ranks and their loader
#: workers share a few cores), and the diff's noise rule needs a few steps on each side to call a change.
CPU_DEMO_ACTIVE = 8


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
