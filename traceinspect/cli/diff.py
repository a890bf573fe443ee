"""``traceinspect diff BASE NEW``: what changed between two runs, and whether it is more than noise.

BASE and NEW are each a folder of traces (or one trace file) or a saved ``report.json``; several captures a side
as ``BASE... -- NEW...`` (``cli/diff_sides.py``). The comparison itself is ``traceinspect.report.diff_runs.diff_runs``
(pure; docs/diff.md); this module loads, renders, gates (exit 1) and handles errors (one line, exit 2).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import click

from ..errors import UsageError
from ..render.diff_text import render_diff_text  # noqa: F401  (the diff's text lives with the other renderers)
from .options import (cache_dir_option, check_readable_input, echo_text, no_cache_option, quiet_option, run_config,
                      settings_option, text_width, width_option, workers_option)
from .output import write_text
from ..render.diff_pages import render_diff_html, render_diff_markdown
from ..render.diff_work_text import render_gate_line, render_work_rate_text
from .diff_sides import SplitCommand, load_sides, split_sides

_REPORT_HEAD = re.compile(rb'^\s*\{\s*"schema"\s*:\s*"traceinspect\.report/')
_MAX_SNIFF = 256 << 20  # a .json file larger than this that does not start like a report is taken as a trace



def _read_report(p: Path) -> dict:
    from ..report.doc import to_dict
    from ..report.io import load

    return to_dict(load(p))


def _is_report_file(p: Path) -> bool:
    """A saved report.json, as opposed to a trace: by its first bytes, or (plain .json files that are not huge) by
    parsing it and finding the report schema and no ``traceEvents``."""
    try:
        with open(p, "rb") as f:
            head = f.read(4096)
    except OSError as exc:
        raise UsageError(f"{p}: cannot read ({exc.strerror or exc})") from None
    if _REPORT_HEAD.match(head):
        return True
    if p.name.endswith(".json") and b"traceEvents" not in head and p.stat().st_size <= _MAX_SNIFF:
        try:
            d = json.loads(p.read_bytes())
        except (json.JSONDecodeError, UnicodeDecodeError):
            return False
        return isinstance(d, dict) and "schema" in d and "traceEvents" not in d
    return False


def _load_one(path: str, config=None):
    """A saved report.json as a dict, or a folder (or file) of traces as ``report_folder``'s result."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{path}: no such file or folder")
    check_readable_input(path)
    if p.is_file() and _is_report_file(p):
        return _read_report(p)
    from ..config import DEFAULT
    from ..run import report_folder

    return report_folder(str(p), config or DEFAULT)


def _parse_pairs(values) -> list[tuple[int, int]]:
    out = []
    for v in values:
        m = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", v)
        if not m:
            raise UsageError(f"--pair {v!r}: expected BASE_RANK:NEW_RANK, e.g. --pair 3:1")
        out.append((int(m.group(1)), int(m.group(2))))
    return out


@click.command(cls=SplitCommand)
@click.argument("paths", nargs=-1, required=True, metavar="BASE NEW | BASE... -- NEW...")
@click.option("--json", "json_path", metavar="PATH", help="Write the diff as JSON to PATH ('-' for stdout).")
@click.option("--markdown", "md_path", metavar="PATH", help="Write the diff as Markdown to PATH.")
@click.option("--html", "html_path", metavar="PATH", help="Write the diff as a self-contained HTML page to PATH.")
@click.option("--fail-on-regression", "fail_pct", type=click.FloatRange(min=0), metavar="PCT",
              help="Exit 1 when what the work change costs at BASE's own rates exceeds PCT % of BASE's step, or "
                   "NEW's step is slower by more than PCT % beyond the noise and the work changed (docs/diff.md); "
                   "what tripped it is printed.")
@click.option("--count-machine", is_flag=True,
              help="With --fail-on-regression: a slower step with the same work (a machine difference) trips too.")
@click.option("--pair", "pairs", multiple=True, metavar="BASE:NEW",
              help="Compare base rank BASE with new rank NEW (repeatable); default: ranks with the same id.")
@no_cache_option
@cache_dir_option
@settings_option("Change a threshold for both runs' analyses (repeatable; see `explain RULE`).")
@workers_option
@width_option
@quiet_option
def diff(paths, json_path, md_path, html_path, fail_pct, count_machine, pairs, no_cache, cache_dir, settings,
         workers, width, quiet) -> None:
    """Compare two runs: BASE and NEW are each a folder of traces or a saved report.json; several captures of
    each side as BASE1 BASE2 -- NEW1 NEW2 (or a folder holding several runs).

    What the program did (work: kernels, launches, copies, collectives, batches, syncs) and how fast (rate: time
    per launch and per kernel, waits), and which explains the step-time change; per rank and category: the change
    in mean step time, its spread, and whether the change is larger than the noise (|delta| > 2 x standard error
    and > 1 % of the step; between captures too, given several); then the findings that disappeared, appeared or
    changed severity. Exit 1 when --fail-on-regression trips, 2 with one line on bad input.
    """
    from ..render.document import given
    from ..report.diff_doc import check
    from ..report.diff_runs import diff_runs

    if count_machine and fail_pct is None:
        raise UsageError("--count-machine needs --fail-on-regression PCT")
    base, new = split_sides(paths)
    pair_list = _parse_pairs(pairs)
    config = run_config(no_cache, workers, cache_dir, settings)
    a, inv_a = load_sides(base, config, _load_one)
    b, inv_b = load_sides(new, config, _load_one)
    try:
        dd = diff_runs(a, b, pair_list or None, inventories=(inv_a, inv_b), fail_on_regression=fail_pct,
                       count_machine=count_machine)
    except ValueError as exc:
        raise UsageError(f"--pair: {exc}") from None
    doc = check(dd)  # what the renderers read; the JSON is the diff as written
    _write(md_path, lambda: render_diff_markdown(doc))
    _write(html_path, lambda: render_diff_html(doc))
    _write(json_path, lambda: json.dumps(dd, indent=1))
    if not quiet and json_path != "-":
        echo_text(render_diff_text, doc, width)
        click.echo(render_work_rate_text(doc, width=text_width(width)), nl=False)
    gate = given(doc.gate)
    if gate is not None:
        click.echo(render_gate_line(gate), err=quiet or json_path == "-")
        if gate.tripped:
            raise SystemExit(1)


def _write(path: str | None, make) -> None:
    """``make()``'s text into ``path`` (``write_text``; a missing folder is made), or onto stdout for ``-``;
    nothing without a path."""
    if not path:
        return
    if path != "-":
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"{path}: cannot write ({exc.strerror or exc})") from None
    write_text(path, make())
