"""``traceinspect diff BASE NEW``: what changed between two runs, and whether it is more than noise.

BASE and NEW are each a folder of traces (or one trace file) or a saved ``report.json``. The comparison itself is
``traceinspect.report.diff.diff_reports`` (pure); this module loads, renders and handles errors (one line, exit 2).
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import click

from ..render.text import LABELS as _TEXT_LABELS
from ..errors import UsageError

_REPORT_HEAD = re.compile(rb'^\s*\{\s*"schema"\s*:\s*"traceinspect\.report/')
_MAX_SNIFF = 256 << 20  # a .json file larger than this that does not start like a report is taken as a trace

LABELS = {
    **_TEXT_LABELS,
    "wall": "step (wall)",
    "dataloader_wait": "CPU: dataloader wait",
    "sync_wait": "CPU: blocked in sync",
}


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


# --------------------------------------------------------------------------------------------------------------
# Text rendering (formatting only: every number comes from the diff dict)


def _ms(us) -> str:
    return "-" if us is None else f"{us / 1000:.2f}"


def _mean_sd(side: dict) -> str:
    if side["mean_us"] is None:
        return "-"
    sd = side["sd_us"]
    return f"{side['mean_us'] / 1000:.2f} ± {sd / 1000:.2f}" if sd is not None else f"{side['mean_us'] / 1000:.2f}"


def _delta(row: dict) -> str:
    d = row["delta_us"]
    if d is None:
        return "-"
    s = f"{round(d / 1000, 2) + 0.0:+.2f}"  # + 0.0: no "-0.00"
    if row.get("share_of_step") is not None:
        s += f" ({round(100 * row['share_of_step'], 1) + 0.0:+.1f}% of step)"
    return s


def _verdict(row: dict, wall: bool) -> tuple[str, str]:
    sig = row["significant"]
    if row["delta_us"] is None:
        return "not on both sides", "dim"
    if sig is None:
        return "cannot tell (<2 steps)", "dim"
    if not sig:
        return "within noise", "dim"
    up = row["delta_us"] > 0
    if wall:
        return ("slower", "bold red") if up else ("faster", "bold green")
    return ("more", "red") if up else ("less", "green")


def render_diff_text(dd: dict, width: int = 120, color: bool = False) -> str:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    buf = io.StringIO()
    con = Console(file=buf, width=width, force_terminal=color, color_system="standard" if color else None,
                  highlight=False, soft_wrap=False)
    con.print(Text("traceinspect diff", style="bold"))
    for side in ("base", "new"):
        s = dd[side]
        steps = ", ".join(f"rank {r}: {n} steps" for r, n in s["steps"].items()) or "no ranks"
        con.print(f"{side:4s}: {s['source']} ({steps})")
    o = dd.get("overall")
    if o and o.get("delta_us") is not None:
        v, style = _verdict(o, True)
        line = Text("Step time (slowest rank): ", style="bold")
        line.append(f"{_ms(o['base']['mean_us'])} ms (rank {o['base_rank']}) -> {_ms(o['new']['mean_us'])} ms "
                     f"(rank {o['new_rank']}), {_delta(o).split(' (')[0]} ms")
        if o.get("rel_change") is not None:
            line.append(f" ({100 * o['rel_change']:+.1f}%)")
        line.append(": ")
        line.append(v, style=style)
        con.print(line)
    con.print(Text(f"Noise rule: {dd['rule']['text']}.", style="dim"))
    for rk in dd["ranks"]:
        con.print()
        names = (f"rank {rk['base_rank']}" if rk["base_rank"] == rk["new_rank"]
                 else f"base rank {rk['base_rank']} vs new rank {rk['new_rank']}")
        basis = rk["basis"]
        what = ("GPU timeline" if basis["base"] == "gpu" else "training thread") if basis["base"] == basis["new"] \
            else f"basis changed: {basis['base']} -> {basis['new']}"
        con.print(Text(f"{names.capitalize()} · {what} · ms per step, mean ± sd over "
                       f"{len(rk['steps']['base'])} / {len(rk['steps']['new'])} steps", style="bold"))
        t = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
        for col, just in (("category", "left"), ("base", "right"), ("new", "right"), ("change ms", "right"),
                          ("noise 2·SE", "right"), ("", "left")):
            t.add_column(col, justify=just)
        for row in rk["metrics"]:
            v, style = _verdict(row, row["metric"] == "wall")
            t.add_row(LABELS.get(row["metric"], row["metric"]), _mean_sd(row["base"]), _mean_sd(row["new"]),
                      _delta(row), _ms(row["noise_us"]), Text(v, style=style))
        con.print(t)
    if dd["only_in_base"] or dd["only_in_new"]:
        con.print()
        if dd["only_in_base"]:
            con.print(f"Ranks only in the base: {', '.join(map(str, dd['only_in_base']))}")
        if dd["only_in_new"]:
            con.print(f"Ranks only in the new run: {', '.join(map(str, dd['only_in_new']))}")
        if not dd["ranks"] and dd["only_in_base"] and dd["only_in_new"]:
            con.print(Text(f"No rank is in both runs; to compare two different ranks: --pair "
                           f"{dd['only_in_base'][0]}:{dd['only_in_new'][0]}", style="yellow"))
    f = dd["findings"]
    con.print()
    con.print(Text("Findings", style="bold"))
    if not any(f.values()):
        con.print("  none in either run")
    for e in f["disappeared"]:
        con.print(Text(f"  gone:      [{e['severity']['base']}] {e['id']}: {e['title_base']}", style="green"))
    for e in f["appeared"]:
        con.print(Text(f"  new:       [{e['severity']['new']}] {e['id']}: {e['title_new']}", style="red"))
    for e in f["severity_changed"]:
        con.print(Text(f"  {e['direction']:10s} {e['id']}: {e['severity']['base']} -> {e['severity']['new']} "
                       f"({e['title_new']})", style="green" if e["direction"] == "better" else "red"))
    for e in f["unchanged"]:
        at = e["time_at_stake_us"]
        stake = (f", at stake {_ms(at['base'])} -> {_ms(at['new'])} ms/step"
                 if at["base"] is not None and at["new"] is not None else "")
        con.print(Text(f"  unchanged: [{e['severity']['new']}] {e['id']}{stake}", style="dim"))
    return buf.getvalue()


@click.command()
@click.argument("base", type=click.Path(path_type=str))
@click.argument("new", type=click.Path(path_type=str))
@click.option("--json", "json_path", metavar="PATH", help="Write the diff as JSON to PATH ('-' for stdout).")
@click.option("--pair", "pairs", multiple=True, metavar="BASE:NEW",
              help="Compare base rank BASE with new rank NEW (repeatable); default: ranks with the same id.")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the cache (decode and analyse everything).")
@click.option("--cache-dir", metavar="DIR", help="Cache folder (default: $TRACEINSPECT_CACHE_DIR or the user cache).")
@click.option("--set", "settings", multiple=True, metavar="NAME=VALUE",
              help="Change a threshold for both runs' analyses (repeatable; see `explain RULE`).")
@click.option("--workers", type=int, default=0, show_default=True, help="Decoding processes (0 = one per core).")
@click.option("--width", type=int, default=None, help="Terminal width.")
@click.option("--quiet", "-q", is_flag=True, help="Do not print the text diff.")
def diff(base, new, json_path, pairs, no_cache, cache_dir, settings, workers, width, quiet) -> None:
    """Compare two runs: BASE and NEW are each a folder of traces or a saved report.json.

    Per rank and category: the change in mean step time, its step-to-step spread, and whether the change is
    larger than the noise (|delta| > 2 x Welch standard error and > 1 % of the step); then the findings that
    disappeared, appeared or changed severity. Exit 2 with one line on bad input.
    """
    import sys

    from ..report.diff import diff_reports

    from .main import run_config

    pair_list = _parse_pairs(pairs)
    config = run_config(no_cache, workers, cache_dir, settings)
    a = load_side(base, config)
    b = load_side(new, config)
    try:
        dd = diff_reports(a, b, pair_list or None)
    except ValueError as exc:
        raise UsageError(f"--pair: {exc}") from None
    if json_path:
        text = json.dumps(dd, indent=1)
        if json_path == "-":
            click.echo(text)
        else:
            try:
                Path(json_path).parent.mkdir(parents=True, exist_ok=True)
                Path(json_path).write_text(text)
            except OSError as exc:
                raise UsageError(f"{json_path}: cannot write ({exc.strerror or exc})") from None
    if not quiet and json_path != "-":
        w = width or (None if sys.stdout.isatty() else 120)
        click.echo(render_diff_text(dd, width=w or 120, color=sys.stdout.isatty()), nl=False)
