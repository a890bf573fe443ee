"""The ``traceinspect`` command line.

``main(argv) -> int``: exit codes 0 ok, 1 a finding at or above ``--fail-on``, 2 usage or input error, 3 an internal
error (``exits.py``). User errors print one line on stderr, never a traceback. The options several commands share
are ``options.py``'s, the writing of documents ``output.py``'s.
"""

from __future__ import annotations

import sys

import click

from ..errors import EXIT_FINDING, UsageError
from ..render.safe import path as shown
from . import exits
from . import formats
from .options import (cache_dir_option, check_readable_input, echo_text, no_cache_option, quiet_option, run_config,
                      settings_option, width_option, workers_option)


class _Commands(click.Group):
    """The commands kept in their own modules are imported when a command line names them (or ``--help`` lists
    them), not at start-up: a report imports no capture, demo or diff code. Each imports only click and the
    standard library at load time, so a failure to import one is a broken install and raises: not hidden."""

    LAZY = {"capture": "capture", "demo": "capture", "diff": "diff"}  # command -> its module in this package

    def list_commands(self, ctx) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.LAZY})

    def get_command(self, ctx, name: str):
        if name in self.LAZY and name not in self.commands:
            from importlib import import_module

            self.add_command(getattr(import_module(f"{__package__}.{self.LAZY[name]}"), name))
        return super().get_command(ctx, name)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="traceinspect")
def cli() -> None:
    """Where the time of a distributed PyTorch training step goes, and what to change.

    Exit codes: 0 ok, 1 a finding reached --fail-on, 2 a usage or input error (one line), 3 an internal error (one
    line naming the file its traceback was saved to), 130 interrupted, 143 terminated.
    """


def _progress_factory(paths_total: int, enabled: bool):
    """Progress of loads that take more than a moment: on a terminal a rich bar on stderr (bytes of the known
    total, MB/s, then the stage label "analyzing" once every byte is read); elsewhere (CI, pipes) one plain line
    per stage on stderr. Returns (start, update, stop) or Nones for small loads and --quiet."""
    if not enabled or paths_total < (64 << 20):
        return None, None, None
    import time

    from ..render import format as fmt

    state = {"done": 0, "t0": time.monotonic(), "stage": "reading"}
    if not sys.stderr.isatty():
        say = exits.say

        def update(_path: str, nbytes: int, _total: int) -> None:
            state["done"] += nbytes
            if state["stage"] == "reading" and state["done"] >= paths_total:
                state["stage"] = "analyzing"
                say(f"read {fmt.mb(paths_total)} in {time.monotonic() - state['t0']:.1f} s; analyzing")

        return (lambda: say(f"reading {fmt.mb(paths_total)} of traces"), update,
                lambda: say(f"done in {time.monotonic() - state['t0']:.1f} s"))
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn, TransferSpeedColumn

    prog = Progress(TextColumn("{task.description:<9}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                    TimeElapsedColumn(), console=Console(stderr=True), transient=True)
    task = prog.add_task("reading", total=paths_total)

    def update(_path: str, nbytes: int, _total: int) -> None:
        state["done"] += nbytes
        prog.update(task, advance=nbytes, description="reading" if state["done"] < paths_total else "analyzing")

    return prog.start, update, prog.stop


class _BarObserver:
    """The run's observer for the terminal: a progress bar for big loads (see ``_progress_factory``)."""

    def __init__(self, enabled: bool):
        self.enabled, self.stop, self.update = enabled, None, None

    def begin(self, files, total_bytes: int) -> None:
        start, self.update, self.stop = _progress_factory(total_bytes, self.enabled)
        if start:
            start()

    def decoded(self, path: str, nbytes: int, total: int = 0) -> None:
        if self.update:
            self.update(path, nbytes, total)

    def end(self, from_cache: bool) -> None:
        if self.stop:
            self.stop()


@cli.command(cls=formats.FormatsCommand)
@click.argument("path", type=click.Path(path_type=str))
@click.option("--fail-on", type=click.Choice(["info", "warning", "critical"]),
              help="Exit 1 when a finding reaches this severity (docs/findings.md); the findings that did are printed.")
@click.option("--strict", is_flag=True, help="Any file that cannot be read is an error (exit 2).")
@no_cache_option
@cache_dir_option
@settings_option("Change a threshold, e.g. --set host_sync_share_warning=0.1 (repeatable; see `explain RULE`).")
@workers_option
@click.option("--executor", type=click.Choice(["local", "dask"]), default="local", show_default=True,
              help="Where the per-rank stage runs.")
@click.option("--scheduler", metavar="ADDRESS", help="Dask scheduler address (tcp://...) for --executor dask.")
@width_option
@quiet_option
@click.option("--run", "run_no", type=click.IntRange(min=1), metavar="N",
              help="Report run N of the folder (1 the oldest; default the most recent).")
@click.option("--all-runs", is_flag=True, help="One report per run of the folder (output names get .runN).")
def report(path, fail_on, strict, no_cache, cache_dir, settings, workers, executor, scheduler, width, quiet, run_no,
           all_runs, **outputs) -> None:
    """Analyze the traces under PATH (a folder of per-rank traces, or one file) and report."""
    on_stdout = formats.stdout_format("report", outputs)
    if scheduler is not None and not scheduler.strip():  # an unset variable in a script: never a local cluster
        raise UsageError(f"--scheduler {scheduler!r}: empty (expected tcp://HOST:PORT; leave --scheduler out for a "
                         "local cluster)")
    if all_runs:
        from .runs import report_all_runs

        return report_all_runs(click.get_current_context(), report)
    from ..render import sections
    from ..render.text import render_text
    from ..run import report_folder

    check_readable_input(path)
    formats.check("report", outputs)
    config = run_config(no_cache, workers, cache_dir, settings, executor=executor, scheduler=scheduler, run=run_no)
    result = report_folder(path, config, _BarObserver(not quiet))
    doc = result.doc
    for line in sections.skipped(doc):
        exits.say(f"skipped {line}")
    if strict and doc.skipped:
        raise UsageError(f"{len(doc.skipped)} file(s) skipped and --strict is set")
    formats.write("report", outputs, doc, source=path)
    if not quiet and not on_stdout:
        echo_text(render_text, doc, width)
    if fail_on:
        _fail_on(doc, fail_on)


def _fail_on(doc, level: str) -> None:
    """Exit 1 when a finding reaches ``level``, naming each finding that did (on stderr: stdout may be JSON)."""
    from ..diagnose.finding import severity_rank
    from ..render.document import given

    tripped = [f for f in doc.findings if severity_rank(f.severity) >= severity_rank(level)]
    if not tripped:
        return
    exits.say(f"--fail-on {level}: {len(tripped)} finding(s) at or above {level}:")
    for f in tripped:
        at = f.time_at_stake_us
        stake = f", {at / 1000:.2f} ms/step at stake" if at else ""
        click.echo(shown(f"  [{f.severity}] {f.id}{stake}: {given(f.severity_reason) or f.title}"), err=True)
    raise SystemExit(EXIT_FINDING)


def _load_report(path: str):
    """A saved report.json as its ``ReportDoc``, checked against the contract (one-line errors naming the file)."""
    from ..report.io import load

    check_readable_input(path)
    return load(path)


@cli.command(cls=formats.FormatsCommand)
@click.argument("report_json", metavar="REPORT.JSON", type=click.Path(path_type=str))
@width_option
@quiet_option
def render(report_json, width, quiet, **outputs) -> None:
    """Render a saved report.json again (text, Markdown, HTML, plots) without the traces."""
    from ..render.text import render_text

    on_stdout = formats.stdout_format("render", outputs)
    doc = _load_report(report_json)
    formats.check("render", outputs)
    formats.write("render", outputs, doc, source=report_json)
    if not quiet and not on_stdout:
        echo_text(render_text, doc, width)


@cli.command()
def rules() -> None:
    """List the rules: id and title (and, on stderr, any rule module that cannot be loaded)."""
    from ..diagnose import load_rules

    mods, errors = load_rules()
    for mod in mods:
        click.echo(f"{mod.ID:24s} {mod.TITLE}")
    for e in errors:
        exits.say(str(e))


@cli.command()
@click.argument("rule_id")
@settings_option("Show the values as `report --set` would.")
def explain(rule_id, settings) -> None:
    """Print one rule's documentation (what it detects, the condition, why it matters, the fix) and the thresholds
    it reads with their current values."""
    import textwrap

    from ..diagnose import all_rules, doc_of, get_rule, thresholds_of
    from ..thresholds import Thresholds, reason

    mod = get_rule(rule_id)
    if mod is None:
        known = ", ".join(m.ID for m in all_rules())
        raise UsageError(f"unknown rule '{rule_id}' (known: {known})")
    chosen, default = Thresholds().with_settings(settings), Thresholds()
    from ..render.text import rst_text

    click.echo(rst_text(doc_of(mod)))
    names = thresholds_of(mod)  # what the rule declares it reads (its detection's, then its claim's)
    if names:
        click.echo("\nThresholds (change with `traceinspect report DIR --set NAME=VALUE`):")
        for n in names:
            value, was = getattr(chosen, n), getattr(default, n)
            changed = "" if value == was else f" (default {was})"
            click.echo(f"  {n} = {value}{changed}")
            if why := reason(n):
                click.echo(textwrap.fill(why, 116, initial_indent=" " * 6, subsequent_indent=" " * 6))


@cli.command()
@click.option("--columns", is_flag=True, help="Print the step fields as a Markdown table instead (docs/metrics.md).")
@click.option("--diff", "of_diff", is_flag=True, help="Print the JSON Schema of `diff --json` instead (docs/diff.schema.json).")
def schema(columns, of_diff) -> None:
    """Print the JSON Schema of the report (`report --json`), generated from its types (docs/report.schema.json)."""
    if of_diff:
        from ..report.diff_doc import diff_schema_text

        click.echo(diff_schema_text(), nl=False)
        return
    if columns:
        from ..report.columns import columns_markdown

        click.echo(columns_markdown(), nl=False)
        return
    from ..report.io import schema_text

    click.echo(schema_text(), nl=False)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code instead of exiting (for tests and embedding)."""
    return exits.run(cli, argv)


def entry() -> None:
    exits.open_missing_streams()
    exits.install_signal_handlers()
    try:
        code = main()
    except BaseException as exc:  # noqa: BLE001 - past main's own handling (a signal between its steps): one line
        code = exits.escaped(exc)
    exits.exit_process(code)


if __name__ == "__main__":
    entry()
