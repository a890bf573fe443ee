"""``traceinspect demo``: capture the ``baseline`` and ``optimized`` presets and show, side by side, what the
fixes changed (the knobs each preset sets, read back from the traces, then ``traceinspect diff``).

The analyzer is imported inside the command, so the demo still captures where only torch, click and rich are.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import click

from ..errors import UsageError
from .demo_verdict import BUSY, BUSY_SHARE, FASTER, NOISE_BASIS, SLOWER, Verdict, judge, mean_sd
from .launch import CaptureFailed, CliError, _import_torch, run_capture
from .options import text_width

#: Sizes that keep a 2-rank CPU capture to seconds on a 2-core machine; 8 small micro-batches per optimizer step, so
#: the step is mostly what the fixes remove (a gradient all-reduce per micro-batch) rather than matmuls.
CPU_DEMO_OVERRIDES: dict[str, Any] = {"batch_size": 4, "accum_steps": 8}
#: Recorded steps per capture in the CPU demo: CPU steps vary more than GPU steps (two ranks and their loader
#: workers share a few cores), and the diff's noise rule needs a few steps on each side to call a change.
CPU_DEMO_ACTIVE = 8
#: The two presets, captured in this order in every round.
PRESETS = ("baseline", "optimized")
#: Most rounds, and the seconds after which no further round starts: a quiet machine decides in one round (about
#: a minute on 2 cores), a busy one needs two or more to show how much a capture's step time moves between runs.
DEMO_MAX_ROUNDS = 4
DEMO_BUDGET_S = 300.0


@click.command("demo")
@click.option("--out", default="./log/demo", show_default=True,
              help="folder for the two captures (OUT/baseline, OUT/optimized; each round overwrites them)")
@click.option("--nproc", type=int, default=None, help="ranks (default: all GPUs, or 2 on CPU)")
@click.option("--model", type=click.Choice(["mlp", "transformer", "deep"]), default=None,
              help="model to train (default: mlp)")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="override a knob in both captures (repeatable)")
@click.option("--rounds", type=click.IntRange(1, 20), default=DEMO_MAX_ROUNDS, show_default=True,
              help="most rounds (a capture of each preset, in turn) to measure until the noise allows a verdict")
@click.option("--budget", type=click.FloatRange(0), default=DEMO_BUDGET_S, show_default=True,
              help="seconds after which no further round starts")
@click.option("--report/--no-report", default=True, show_default=True,
              help="analyze and compare the captures (needs the analyzer's dependencies)")
@click.option("-v", "--verbose", is_flag=True, help="show the ranks' output as they run")
def demo(out, nproc, model, overrides, rounds, budget, report, verbose):
    """Capture the baseline and the optimized DDP step and show what each fix changed."""
    from ..capture import workload

    try:
        knobs: dict[str, Any] = workload.parse_overrides(list(overrides))
        for preset in PRESETS:  # check before the first capture starts
            workload.apply_overrides(workload.preset_config(preset, cuda=False),
                                     {**knobs, **({"model": model} if model else {})})
    except workload.KnobError as e:
        raise CliError(str(e)) from None
    torch = _import_torch()
    cuda = torch.cuda.is_available()
    if not cuda:  # CPU-friendly sizes unless the user chose their own
        knobs = {**CPU_DEMO_OVERRIDES, **knobs}
    root = Path(out)
    folders = {preset: root / preset for preset in PRESETS}

    def capture(preset: str) -> None:
        t0 = time.monotonic()
        try:
            run_capture(folders[preset], preset=preset, nproc=nproc, overrides=knobs, model=model,
                        overwrite=True, verbose=verbose, active=3 if cuda else CPU_DEMO_ACTIVE,
                        on_start=lambda what: click.echo(f"traceinspect: capturing {what}", err=True))
        except CaptureFailed as e:
            raise CliError(str(e)) from None
        click.echo(f"traceinspect: {preset} captured in {time.monotonic() - t0:.1f}s", err=True)

    if not report:
        for preset in PRESETS:
            capture(preset)
        click.echo(f"next: traceinspect report {folders['baseline']}; traceinspect report {folders['optimized']}")
        return
    try:
        from .._optional import require
        from ..run import ANALYSIS_STACK

        require(ANALYSIS_STACK, "the demo's comparison")
    except UsageError as e:
        for preset in PRESETS:
            capture(preset)
        raise CliError(f"captured into {root}, but the analyzer cannot load ({e}); run "
                       f"`traceinspect report {folders['baseline']}` where traceinspect is fully installed") from None
    measured = _measure(capture, folders, rounds, budget, gpu=cuda)
    knob_diff = _knob_diff(*(_workload_settings(measured.reports[preset]) for preset in PRESETS))
    width = text_width()  # the terminal's ($COLUMNS), as the report's: wider lines would wrap in it
    from rich.console import Console

    from ..render.diff_text import render_diff_text

    console = Console(width=width)
    render_knobs(knob_diff, console=console, cuda=cuda)
    render_rounds(measured, console=console)
    click.echo(f"Per category, round {len(measured.rounds)} (its steps' own noise; the step time's verdict: "
               "above)")
    click.echo(render_diff_text(_without_wall(measured.diff), width=width), nl=False)
    click.echo(f"details: traceinspect report {folders['baseline']}\n"
               f"         traceinspect report {folders['optimized']}")


@dataclass(frozen=True)
class Round:
    base_us: float      # the baseline capture's step time: its slowest rank's mean step
    new_us: float       # the optimized capture's
    other_work: float | None  # most of the machine's CPU time other work took before, between or after the
                              # round's captures (None: unknown)


@dataclass(frozen=True)
class Measured:
    rounds: list[Round]
    verdict: Verdict
    diff: dict          # traceinspect diff of the last round's two captures
    reports: dict       # the last round's report of each preset


def _measure(capture: Callable[[str], None], folders: Mapping[str, Path], max_rounds: int, budget_s: float,
             gpu: bool, config: Any = None) -> Measured:
    """Capture the presets in turn, a round at a time, until the verdict is decided (at least two rounds when the
    machine is busy: one capture a side shows no between-run spread), ``max_rounds`` are done, or another round
    would end past ``budget_s``. Each round overwrites the folders, so they hold the last round. ``config``: the
    analyzer's Config (default: its defaults)."""
    from ..config import DEFAULT
    from ..report.diff import diff_reports
    from ..run import report_folder

    rounds: list[Round] = []
    t0 = time.monotonic()
    while True:
        samples, reports = [], {}
        for preset in PRESETS:
            samples.append(None if gpu else _busy_share())  # while none of our ranks runs
            capture(preset)
            reports[preset] = report_folder(str(folders[preset]), config or DEFAULT).to_dict()
        samples.append(None if gpu else _busy_share())
        known = [x for x in samples if x is not None]
        other = max(known) if known else None
        dd = diff_reports(reports["baseline"], reports["optimized"])
        overall = dd.get("overall") or {}
        if overall.get("delta_us") is None:
            raise CliError(f"the captures in {folders['baseline'].parent} hold no steps to compare")
        rounds.append(Round(overall["base"]["mean_us"], overall["new"]["mean_us"], other))
        busy = any(r.other_work is not None and r.other_work > BUSY_SHARE for r in rounds)
        verdict = judge([r.base_us for r in rounds], [r.new_us for r in rounds], busy=busy,
                        step_noise_us=overall.get("noise_us"))
        n, elapsed = len(rounds), time.monotonic() - t0
        if verdict.decided and (n >= 2 or not busy):
            break
        if n >= max_rounds or elapsed + elapsed / n > budget_s:
            break
        click.echo(f"traceinspect: round {n}: {verdict.label} so far; measuring another round", err=True)
    return Measured(rounds, verdict, dd, reports)


def _without_wall(dd: dict) -> dict:
    """The diff without its step-time lines (the demo's verdict over all rounds replaces them)."""
    ranks = [{**rk, "metrics": [m for m in rk["metrics"] if m["metric"] != "wall"]} for rk in dd["ranks"]]
    return {**dd, "overall": None, "ranks": ranks}


def _busy_share(sample_s: float = 0.5) -> float | None:
    """The share of the machine's CPU time (all cores) that was not idle over ``sample_s``, from /proc/stat; None
    where /proc/stat is missing. Taken while no capture runs, it is the share other work takes."""
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
    return min(max(1.0 - (i1 - i0) / max(t1 - t0, 1), 0.0), 1.0)


def render_rounds(measured: Measured, console: Any = None) -> None:
    """The step time of each round's two captures and the verdict over all rounds, as a rich table."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    v = measured.verdict
    t = Table(title="Step time, ms (slowest rank, mean of its steps), baseline and optimized captured in turn",
              title_justify="left", box=None, show_edge=False, pad_edge=False, header_style="bold")
    for col, just in (("round", "left"), ("baseline", "right"), ("optimized", "right"), ("change", "right"),
                      ("noise", "right"), ("other work", "right"), ("verdict", "left")):
        t.add_column(col, justify=just, no_wrap=True)
    for i, r in enumerate(measured.rounds, 1):
        other = "-" if r.other_work is None else f"{100 * r.other_work:.0f} %"
        t.add_row(str(i), f"{r.base_us / 1000:.2f}", f"{r.new_us / 1000:.2f}", f"{(r.new_us - r.base_us) / 1000:+.2f}",
                  "", other, "")
    base_sd, new_sd = (_sd([getattr(r, k) for r in measured.rounds]) for k in ("base_us", "new_us"))
    rel = f" ({100 * v.rel_change:+.0f} %)" if v.rel_change is not None else ""
    noise = "-" if v.threshold_us is None else f"±{v.threshold_us / 1000:.2f}"
    style = {FASTER: "bold green", SLOWER: "bold red"}.get(v.label, "bold yellow")
    t.add_row(f"all {len(measured.rounds)}", f"{v.base_us / 1000:.2f}{base_sd}", f"{v.new_us / 1000:.2f}{new_sd}",
              f"{v.delta_us / 1000:+.2f}{rel}", noise, "busy" if v.busy else "quiet", f"[{style}]{v.label}[/]",
              end_section=True)
    console.print(t)
    console.print(f"noise: {NOISE_BASIS[v.noise]}; other work: the cores' busy share around the captures "
                  f"(busy above {100 * BUSY_SHARE:.0f} %)")
    if v.label == BUSY:
        console.print("Other work kept this machine's cores busy, so the two presets' step times say more about the "
                      "machine than about the fixes; run the demo again when it is quiet (or with --rounds more).")


def _sd(values: list[float]) -> str:
    sd = mean_sd(values)[1]
    return "" if sd is None else f" ± {sd / 1000:.2f}"


# --------------------------------------------------------------------------- comparison


def _workload_settings(report: dict) -> dict[str, Any]:
    """The workload config a capture really ran with: its first rank's capture metadata, as the report holds it.

    The trace's metadata (not the preset recomputed here) shows the values the
    ranks resolved on their device: worker counts, auto batch size, pinning.
    """
    for rank in report.get("ranks") or []:
        return dict((rank.get("metadata") or {}).get("workload") or {})
    return {}


def _knob_diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(knob, baseline value, optimized value) for every workload knob that differs."""
    from ..capture import workload

    skip = {"preset"}
    names = [f for f in workload.WorkloadConfig.__dataclass_fields__ if f not in skip]
    return [(k, before.get(k), after.get(k)) for k in names if before.get(k) != after.get(k)]


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
