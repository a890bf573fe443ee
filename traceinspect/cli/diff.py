"""``traceinspect diff BASE NEW``: what changed between two runs, and whether it is more than noise.

BASE and NEW are each a folder of traces (or one trace file) or a saved ``report.json``. The comparison itself is
``traceinspect.report.diff.diff_reports`` (pure); this module loads, renders and handles errors (one line, exit 2).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import click

from ..errors import UsageError
from ..render.diff_text import render_diff_text  # noqa: F401  (the diff's text lives with the other renderers)
from .options import (cache_dir_option, check_readable_input, echo_text, no_cache_option, quiet_option, run_config,
                      settings_option, width_option, workers_option)
from .output import write_text

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


def load_side(path: str, config=None) -> dict:
    """A report dict from a saved report.json, or from a folder (or file) of traces through ``report_folder``."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{path}: no such file or folder")
    check_readable_input(path)
    if p.is_file() and _is_report_file(p):
        return _read_report(p)
    from ..config import DEFAULT
    from ..run import report_folder

    return report_folder(str(p), config or DEFAULT).to_dict()


def _parse_pairs(values) -> list[tuple[int, int]]:
    out = []
    for v in values:
        m = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", v)
        if not m:
            raise UsageError(f"--pair {v!r}: expected BASE_RANK:NEW_RANK, e.g. --pair 3:1")
        out.append((int(m.group(1)), int(m.group(2))))
    return out


@click.command()
@click.argument("base", type=click.Path(path_type=str))
@click.argument("new", type=click.Path(path_type=str))
@click.option("--json", "json_path", metavar="PATH", help="Write the diff as JSON to PATH ('-' for stdout).")
@click.option("--pair", "pairs", multiple=True, metavar="BASE:NEW",
              help="Compare base rank BASE with new rank NEW (repeatable); default: ranks with the same id.")
@no_cache_option
@cache_dir_option
@settings_option("Change a threshold for both runs' analyses (repeatable; see `explain RULE`).")
@workers_option
@width_option
@quiet_option
def diff(base, new, json_path, pairs, no_cache, cache_dir, settings, workers, width, quiet) -> None:
    """Compare two runs: BASE and NEW are each a folder of traces or a saved report.json.

    Per rank and category: the change in mean step time, its step-to-step spread, and whether the change is
    larger than the noise (|delta| > 2 x Welch standard error and > 1 % of the step); then the findings that
    disappeared, appeared or changed severity. Exit 2 with one line on bad input.
    """
    from ..report.diff import diff_reports

    pair_list = _parse_pairs(pairs)
    config = run_config(no_cache, workers, cache_dir, settings)
    a = load_side(base, config)
    b = load_side(new, config)
    try:
        dd = diff_reports(a, b, pair_list or None)
    except ValueError as exc:
        raise UsageError(f"--pair: {exc}") from None
    if json_path:
        if json_path != "-":
            try:
                Path(json_path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UsageError(f"{json_path}: cannot write ({exc.strerror or exc})") from None
        write_text(json_path, json.dumps(dd, indent=1))
    if not quiet and json_path != "-":
        echo_text(render_diff_text, dd, width)
