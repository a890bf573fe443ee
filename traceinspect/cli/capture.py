"""``traceinspect capture`` and ``traceinspect demo``: record traces of the reference DDP workload.

``capture`` launches :mod:`traceinspect.capture.workload` under torchrun
(``python -m torch.distributed.run --standalone``): one process per rank, gloo on
CPU, NCCL with one GPU per rank. ``demo`` captures the ``baseline`` and
``optimized`` presets and shows, side by side, what the fixes changed.

torch, the workload and the analyzer are imported inside the commands, so that
registering these commands costs nothing, the analyzer runs where torch is not
installed, and capturing runs where only torch, click and rich are (a GPU box
without msgspec/pyarrow): ``python -m traceinspect.cli.capture capture ...``. The launching is launch.py's, the
demo demo.py's; both re-exported here.
"""

from __future__ import annotations

import time

import click

from .demo import CPU_DEMO_ACTIVE, CPU_DEMO_OVERRIDES, _knob_diff, _workload_settings, demo, render_knobs  # noqa: F401
from .launch import (CaptureFailed, CliError, _child_env, _failure_reason, _import_torch, _package_root,  # noqa: F401
                     _trace_files, run_capture)

__all__ = ["capture", "demo", "run_capture", "render_knobs",
           "CaptureFailed", "CPU_DEMO_OVERRIDES", "standalone_main"]

# --------------------------------------------------------------------------- commands

_SCHEDULE_OPTIONS = (
    click.option("--wait", default=1, show_default=True, help="idle steps before each window"),
    click.option("--warmup", default=1, show_default=True, help="profiled but discarded steps"),
    click.option("--active", default=3, show_default=True, help="recorded steps per window"),
    click.option("--repeat", default=1, show_default=True, help="windows per rank (0 = until the run ends)"),
)


def _with_schedule(f):
    for opt in reversed(_SCHEDULE_OPTIONS):
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
                            on_start=lambda what: click.echo(f"traceinspect: capturing {what}", err=True))
    except CaptureFailed as e:
        raise CliError(str(e)) from None
    ranks = len({p.name.split(".", 1)[0] for p in files})
    click.echo(f"traceinspect: wrote {len(files)} trace file(s) ({ranks} rank(s) x {max(repeat, 1)} "
               f"window(s)) in {time.monotonic() - t0:.1f}s", err=True)
    click.echo(f"next: traceinspect report {out}")


@click.group()
def standalone_main() -> None:
    """traceinspect capture commands (for machines with torch but without the analyzer)."""


standalone_main.add_command(capture)
standalone_main.add_command(demo)

if __name__ == "__main__":
    standalone_main()
