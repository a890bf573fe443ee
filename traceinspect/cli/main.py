"""The ``traceinspect`` command line.

``main(argv) -> int``: exit codes 0 ok, 1 a finding at or above ``--fail-on``, 2 usage or input error. User errors
print one line on stderr, never a traceback.
"""

from __future__ import annotations


import sys
from pathlib import Path

import click

from ..errors import TraceInspectError, UsageError

EXIT_OK, EXIT_FINDING, EXIT_INPUT = 0, 1, 2


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="traceinspect")
def cli() -> None:
    """Where the time of a distributed PyTorch training step goes, and what to change."""


def _progress_factory(paths_total: int, enabled: bool):
    """A rich progress bar on stderr for loads that take more than a moment (files done, MB/s)."""
    if not enabled or paths_total < (64 << 20):
        return None, None
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn
    from rich.console import Console

    prog = Progress(
        TextColumn("decoding"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(),
        console=Console(stderr=True), transient=True,
    )
    task = prog.add_task("decode", total=None)

    def update(_path: str, nbytes: int, _total: int) -> None:
        prog.update(task, advance=nbytes)

    return prog, update


@cli.command()
@click.argument("path", type=click.Path(path_type=str))
@click.option("--json", "json_path", metavar="PATH", help="Write the JSON report to PATH ('-' for stdout).")
@click.option("--markdown", "md_path", metavar="PATH", help="Write the Markdown report to PATH.")
@click.option("--html", "html_path", metavar="PATH", help="Write a self-contained HTML report to PATH.")
@click.option("--out", "out_dir", metavar="DIR", help="Write report.json, report.md and the plots into DIR.")
@click.option("--fail-on", type=click.Choice(["info", "warning", "critical"]),
              help="Exit 1 when a finding reaches this severity (docs/findings.md); the findings that did are printed.")
@click.option("--strict", is_flag=True, help="Any file that cannot be read is an error (exit 2).")
@click.option("--no-cache", is_flag=True, help="Decode the JSON even when parsed columns are cached.")
@click.option("--workers", type=int, default=0, show_default=True, help="Decoding processes (0 = one per core).")
@click.option("--executor", type=click.Choice(["local", "dask"]), default="local", show_default=True,
              help="Where the per-rank stage runs.")
@click.option("--scheduler", metavar="ADDRESS", help="Dask scheduler address (tcp://...) for --executor dask.")
@click.option("--tensorboard", is_flag=True, help="Write per-step scalars and findings into the TensorBoard run.")
@click.option("--width", type=int, default=None, help="Terminal width for the text report.")
@click.option("--quiet", "-q", is_flag=True, help="Do not print the text report.")
def report(path, json_path, md_path, html_path, out_dir, fail_on, strict, no_cache, workers, executor, scheduler,
           tensorboard, width, quiet) -> None:
    """Analyze the traces under PATH (a folder of per-rank traces, or one file) and report."""
    from ..config import Config
    from ..render.text import render_text

    from ..run import cache
    from ..load.discover import find_trace_files  # standard library only: the cached path imports no pandas/numpy

    config = Config(workers=workers, use_cache=not no_cache)
    try:
        files = find_trace_files(path)
        total = sum(f.stat().st_size for f in files)
    except (TraceInspectError, OSError):
        files, total = [], 0
    # The whole report's cache key: every trace file (path, size, mtime), the settings and the code, taken once,
    # before the analysis reads the files.
    anchor = Path(path) if Path(path).is_dir() else Path(path).parent
    key = cache.result_key("report", files, config) if files and config.use_cache else None
    needs_report_object = bool(out_dir or html_path)
    d = rep = None
    if key and not needs_report_object and executor == "local":
        d = cache.get_result(anchor / "_", key, config)
    if d is None:
        prog, update = _progress_factory(total, sys.stderr.isatty() and not quiet)
        if prog:
            prog.start()
        from ..run.api import analyze_path

        try:
            rep = analyze_path(path, config, progress=update, executor=executor, scheduler=scheduler)
        finally:
            if prog:
                prog.stop()
        d = rep.to_dict()
        if key:
            cache.put_result(anchor / "_", key, d, config)
    for s in d["skipped"]:
        click.echo(f"traceinspect: skipped {s['file']}: {s['reason']}", err=True)
    if strict and d["skipped"]:
        raise UsageError(f"{len(d['skipped'])} file(s) skipped and --strict is set")
    if json_path:
        text = dumps(d)
        if json_path == "-":
            click.echo(text)
        else:
            _write(json_path, text)
    if md_path:
        from ..render.markdown import render_markdown

        _write(md_path, render_markdown(d))
    if out_dir:
        _write_out_dir(out_dir, d, rep)
    if html_path:
        from ..render.html import render_html

        _write(html_path, render_html(d, rep))
    if tensorboard:
        from ..render.tensorboard import write_tensorboard

        where = write_tensorboard(d, path)
        click.echo(f"traceinspect: TensorBoard summaries written to {where}", err=True)
    if not quiet and json_path != "-":
        w = width or (None if sys.stdout.isatty() else 120)
        click.echo(render_text(d, width=w or 120, color=sys.stdout.isatty()), nl=False)
    if fail_on:
        _fail_on(d, fail_on)


def _fail_on(d: dict, level: str) -> None:
    """Exit 1 when a finding reaches ``level``, naming each finding that did (on stderr: stdout may be JSON)."""
    from ..diagnose.finding import severity_rank

    tripped = [f for f in d["findings"] if severity_rank(f["severity"]) >= severity_rank(level)]
    if not tripped:
        return
    click.echo(f"traceinspect: --fail-on {level}: {len(tripped)} finding(s) at or above {level}:", err=True)
    for f in tripped:
        at = f.get("time_at_stake_us")
        stake = f", {at / 1000:.2f} ms/step at stake" if at else ""
        click.echo(f"  [{f['severity']}] {f['id']}{stake}: {f.get('severity_reason') or f['title']}", err=True)
    raise SystemExit(EXIT_FINDING)


def dumps(d: dict) -> str:
    """The JSON report as indented text (msgspec: a large report encodes in a fraction of the stdlib's time)."""
    import msgspec

    return msgspec.json.format(msgspec.json.encode(d), indent=1).decode()


def _write(path: str, text: str) -> None:
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write ({exc.strerror or exc})") from None


def _write_out_dir(out_dir: str, d: dict, rep) -> None:
    from ..render.markdown import render_markdown

    out = Path(out_dir)
    _write(str(out / "report.json"), dumps(d))
    _write(str(out / "report.md"), render_markdown(d))
    try:
        from ..render.plots import write_plots
    except ImportError:
        return
    write_plots(d, rep, out)


@cli.command()
def rules() -> None:
    """List the rules: id and title."""
    from ..diagnose import all_rules

    for mod in all_rules():
        click.echo(f"{mod.ID:24s} {mod.TITLE}")


@cli.command()
@click.argument("rule_id")
def explain(rule_id) -> None:
    """Print one rule's documentation: what it detects, the condition, why it matters, the fix."""
    from ..diagnose import all_rules, doc_of, get_rule

    mod = get_rule(rule_id)
    if mod is None:
        known = ", ".join(m.ID for m in all_rules())
        raise UsageError(f"unknown rule '{rule_id}' (known: {known})")
    click.echo(doc_of(mod))


def _register_optional() -> None:
    """Commands in their own modules (capture needs no analysis stack; diff needs no capture stack)."""
    try:
        from .capture import capture, demo

        cli.add_command(capture)
        cli.add_command(demo)
    except ImportError:
        pass
    try:
        from .diff import diff

        cli.add_command(diff)
    except ImportError:
        pass


_register_optional()


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code instead of exiting (for tests and embedding)."""
    try:
        cli.main(args=argv, prog_name="traceinspect", standalone_mode=False)
    except SystemExit as exc:
        return int(exc.code or 0)
    except click.exceptions.Abort:
        click.echo("traceinspect: aborted", err=True)
        return EXIT_INPUT
    except click.ClickException as exc:
        click.echo(f"traceinspect: {exc.format_message()}", err=True)
        return EXIT_INPUT
    except TraceInspectError as exc:
        click.echo(f"traceinspect: {exc}", err=True)
        return exc.exit_code
    except KeyboardInterrupt:
        click.echo("traceinspect: interrupted", err=True)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    return EXIT_OK


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
