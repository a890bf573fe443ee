"""The terminal report, from the typed report document (so a saved report.json renders the same way).

Sections in ``vocabulary.SECTIONS`` order: verdict, waterfall, findings, per-step tables, nvidia-smi view, skipped
files. Renderers format; they do not compute: every number comes from the report, written by ``format``.
Everything is printed as rich ``Text`` (``plain``), never as markup, on a console that reads no markup or emoji
codes either: a name or path holding ``[/x]`` or ``:smile:`` prints as written, and its control characters as
visible escapes (``safe.visible``).
"""

from __future__ import annotations

import io
import re

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import format as fmt, layout, safe, sections, throughput, waterfall
from ..report.doc import RankDoc, ReportDoc
from .document import given, report_doc
from .sections import shown_steps, verdict  # noqa: F401  (verdict: re-exported for callers)
from .vocabulary import CPU_BREAKDOWN, GPU_BREAKDOWN

SEV_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}

# Kept for callers of the earlier names: (breakdown key, column header).
GPU_COLUMNS = tuple((k, f"{short} %") for k, short, _ in GPU_BREAKDOWN)
CPU_COLUMNS = tuple((k, f"{short} %") for k, short, _ in CPU_BREAKDOWN)
ranges_text = fmt.ranges


def plain(text, style: str = "") -> Text:
    """A line for the terminal: literal text (no markup), control characters as visible escapes."""
    return Text(safe.visible(text), style=style)


def console_for(buf, width: int, color: bool) -> Console:
    """A console that prints what it is given literally: no markup, no emoji codes, no highlighting."""
    return Console(file=buf, width=width, force_terminal=color, color_system="standard" if color else None,
                   highlight=False, soft_wrap=False, markup=False, emoji=False)


def say(console: Console, text, indent: int = 0, hang: int = 2, style: str = "") -> None:
    """One line of the report (``Text`` or a string, printed as ``plain``), wrapped at spaces to the console's
    width: the first line ``indent`` spaces in, the lines it continues on ``hang`` more."""
    t = text if isinstance(text, Text) else plain(text, style)
    if not t.plain:
        console.print()
        return
    cuts = layout.breaks(t.plain, console.width - indent, console.width - indent - hang)
    for i, part in enumerate(t.divide(cuts)):
        part.rstrip()
        lead = len(part.plain) - len(part.plain.lstrip()) if i else 0
        console.print(Text(" " * (indent + (hang if i else 0))) + part[lead:])


def code(console: Console, lines: list[str], indent: int, style: str = "") -> None:
    """Code lines laid out by ``layout.code`` (never broken mid-token); one that cannot be broken is printed whole,
    past the width (the terminal wraps it for display)."""
    for line in layout.code(lines, console.width - indent):
        console.print(plain(" " * indent + line, style), soft_wrap=True)


def _step_tables(r: RankDoc, width: int) -> list[Table]:
    """The rank's step table; split into groups of columns (each with the step column) when wider than ``width``."""
    head = sections.step_header(r)
    rows = [sections.step_cells(r, s) for s in shown_steps(r.steps)]
    widths = [max([cell_len(h)] + [cell_len(row[i]) for row in rows]) + (1 if i else 0) for i, h in enumerate(head)]
    tables = []
    for group in layout.column_groups(widths, width):
        t = Table(title=None, show_edge=False, pad_edge=False, box=None, header_style="bold", padding=(0, 0, 0, 1))
        for i in group:
            t.add_column(head[i], justify="right", no_wrap=True)
        for row in rows:
            t.add_row(*(plain(row[i]) for i in group))
        tables.append(t)
    return tables


def _waterfall(d: ReportDoc, console: Console) -> None:
    w = waterfall.rows(d)
    if w is None:
        return
    console.print()
    say(console, f"Where the step could go (rank {w.rank}): the measured step, each finding's claimed time, "
                 "the projected step", style="bold")
    for line in waterfall.bar_lines(w, columns=console.width - 2):
        say(console, line, indent=2, hang=4)


def _findings(d: ReportDoc, console: Console) -> None:
    console.print()
    if not d.findings:
        console.print(Text("No problems found.", style="bold green"))
        return
    console.print(Text(f"Findings ({len(d.findings)})", style="bold"))
    shortened = False
    for f in d.findings:
        head = Text()
        head.append(plain(f"[{f.severity}] ", style=SEV_STYLE.get(f.severity, "")))
        head.append(plain(f"{f.id}: ", style="bold"))
        head.append(plain(sections.title(f)))
        say(console, head)
        say(console, sections.finding_meta(f), indent=2)
        for line in sections.finding_notes(f):
            say(console, line, indent=2, style="dim")
        evidence = sections.evidence_lines(f, limit=12, items=2)
        for line in evidence:
            say(console, line, indent=2, style="dim")
        shortened = shortened or any(safe.ELLIPSIS in x for x in [head.plain, *evidence])
        console.print(plain("  fix:"))
        code(console, sections.fix_lines(f), 4, style="green")
    if shortened:
        say(console, f"({safe.ELLIPSIS} ends a name or value shortened here: the JSON report, --json PATH, has it "
                     "whole)", style="dim")


def _ranks(d: ReportDoc, console: Console) -> None:
    for r in d.ranks:
        console.print()
        say(console, sections.rank_title(r), style="bold")
        for t in _step_tables(r, console.width):
            console.print(t)
        for note in sections.rank_notes(r):
            say(console, note, style="dim")
    for note in sections.footnotes(d):
        say(console, note, style="dim")
    if d.missing_ranks:
        console.print()
        say(console, f"Missing ranks (no usable trace file): {fmt.ranges(d.missing_ranks)}", style="bold")


def _throughput(d: ReportDoc, console: Console) -> None:
    if not throughput.has_any(d):
        return
    console.print()
    console.print(plain("Throughput, FLOPs and MFU (docs/metrics.md)", style="bold"))
    for line in throughput.job_lines(d):
        say(console, line, indent=2)
    for r in d.ranks:
        lines = throughput.rank_lines(r)
        if lines:
            say(console, f"rank {r.rank}:", indent=2)
            for line in lines:
                say(console, line, indent=4)
        rows = throughput.roofline_rows(r)
        if rows:  # split into groups of columns where too wide; the JSON has every figure
            _tables(console, throughput.ROOFLINE_HEAD, rows, left=3, indent=0)


def _utilization(d: ReportDoc, console: Console) -> None:
    lines = [(r.rank, sections.utilization(r)) for r in d.ranks]
    lines = [(rk, u) for rk, u in lines if u]
    if not lines:
        return
    console.print()
    say(console, "nvidia-smi view (what GPU-Util would have shown, docs/utilization.md)", style="bold")
    for rk, u in lines:
        say(console, f"rank {rk}: {u}", indent=2)


def _tables(console: Console, head: list[str], rows: list[list[str]], left: int = 1, indent: int = 2) -> None:
    """A table of strings at the console's width: split into groups of columns (each with the first column) when it
    is wider; the first ``left`` columns left-aligned (names), the rest right-aligned (numbers)."""
    widths = [max([cell_len(h)] + [cell_len(row[i]) for row in rows]) + 2 for i, h in enumerate(head)]
    for group in layout.column_groups(widths, console.width - indent):
        t = Table(show_edge=False, pad_edge=False, box=None, header_style="bold", padding=(0, 0, 0, 2))
        for i in group:
            t.add_column(head[i], justify="left" if i < left else "right", overflow="fold")
        for row in rows:
            t.add_row(*(plain(row[i]) for i in group))
        console.print(t)


def _memory(d: ReportDoc, console: Console) -> None:
    from . import memory as mem

    lines = [(r, mem.headline(r)) for r in d.ranks]
    lines = [(r, h) for r, h in lines if h]
    missing = mem.not_recorded(d)
    if missing:
        console.print()
        say(console, f"Memory: {missing}", style="dim")
    if not lines:
        return
    console.print()
    say(console, "Memory (docs/memory.md)", style="bold")
    for r, h in lines:
        say(console, h, indent=2)
        m = given(r.memory)
        if m is None:
            continue
        for head, rows, left, under in mem.tables(m, holders=6):
            _tables(console, head, rows, left)
            if under:
                say(console, under, indent=2, style="dim")
        for n in mem.notes(m):
            say(console, n, indent=2, style="dim")


def _cost(d: ReportDoc, console: Console) -> None:
    from . import memory as mem

    costs = [c for c in (mem.cost_line(r) for r in d.ranks) if c]
    tables = [(mem.tradeoff_title(r), mem.tradeoff_rows(r)) for r in d.ranks]
    tables = [(t, rows) for t, rows in tables if t and rows]
    if not costs and not tables:
        return
    console.print()
    say(console, "Cost and the batch x accumulation trade-off (docs/metrics.md)", style="bold")
    for c in costs:
        say(console, c, indent=2)
    for title, rows in tables:
        say(console, title, indent=2)
        _tables(console, mem.TRADEOFF_HEAD, rows)


def render(d: ReportDoc, console: Console) -> None:
    n, world = d.ranks_analyzed, d.world_size
    say(console, f"traceinspect report: {sections.source(d)}", style="bold")
    say(console, f"{n} of {world or n} ranks analyzed" + (f" (world size {world})" if world else ""))
    for line in sections.runs_lines(d):  # several runs, windows or copies in the folder (docs/folders.md)
        say(console, line.strip(), indent=len(line) - len(line.lstrip()))
    say(console, "Verdict: " + verdict(d), style="bold")
    if sections.communication(d):
        say(console, "Communication: " + sections.communication(d))
    _waterfall(d, console)
    _findings(d, console)
    _ranks(d, console)
    _throughput(d, console)
    _utilization(d, console)
    _memory(d, console)
    _cost(d, console)
    if d.errors:
        console.print()
        for e in sections.errors(d):
            say(console, f"analysis error: {e}", style="red")
    if d.skipped:
        console.print()
        say(console, f"Skipped files ({len(d.skipped)})", style="bold")
        for line in sections.skipped(d):
            say(console, line, indent=2, hang=4)


def render_text(doc: ReportDoc | dict, width: int = 120, color: bool = False) -> str:
    """The terminal report in ``width`` columns: prose wrapped at spaces, the step table split into groups of
    columns, the waterfall's bars scaled, fix code broken only where Python allows (``layout``)."""
    buf = io.StringIO()
    render(report_doc(doc), console_for(buf, width, color))
    return buf.getvalue()


_RST = [
    (re.compile(r"\*\*([^*]+)\*\*::"), r"\1:"),  # "**Fix**::" opens a literal block
    (re.compile(r"::$", re.M), ":"),
    (re.compile(r"\*\*([^*]+)\*\*"), r"\1"),
    (re.compile(r"``([^`]+)``"), r"\1"),
    (re.compile(r"(?<![\w*])\*([^*\s][^*]*)\*(?![\w*])"), r"\1"),
    (re.compile(r":[a-z]+:`([^`]+)`"), r"\1"),
]


def rst_text(doc: str) -> str:
    """A rule's reST docstring as plain text for the terminal: no ``**``, double backquotes or ``::`` markers."""
    out, prose = [], []

    def flush() -> None:
        if prose:
            text = "\n".join(prose)  # a paragraph at once: inline markup may span lines
            for pattern, repl in _RST:
                text = pattern.sub(repl, text)
            out.append(text)
            prose.clear()

    for line in doc.splitlines():
        if line.startswith("    "):  # code in literal blocks stays as written
            flush()
            out.append(line)
        else:
            prose.append(line)
    flush()
    return "\n".join(out)
