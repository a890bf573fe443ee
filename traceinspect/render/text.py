"""The terminal report, from the JSON report dict (so a saved report.json renders the same way).

Sections in ``vocabulary.SECTIONS`` order: verdict, waterfall, findings, per-step tables, nvidia-smi view, skipped
files. Renderers format; they do not compute: every number comes from the report dict, written by ``format``.
Everything is printed as rich ``Text`` (``plain``), never as markup, on a console that reads no markup or emoji
codes either: a name or path holding ``[/x]`` or ``:smile:`` prints as written, and its control characters as
visible escapes (``safe.visible``).
"""

from __future__ import annotations

import io
import re

from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import format as fmt, safe, sections, throughput, waterfall
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


def _step_table(r: dict) -> Table:
    t = Table(title=None, show_edge=False, pad_edge=False, box=None, header_style="bold", padding=(0, 0, 0, 1))
    for h in sections.step_header(r):
        t.add_column(h, justify="right")
    for s in shown_steps(r["steps"]):
        t.add_row(*(plain(c) for c in sections.step_cells(r, s)))
    return t


def _waterfall(d: dict, console: Console) -> None:
    w = waterfall.rows(d)
    if w is None:
        return
    console.print()
    console.print(plain(f"Where the step could go (rank {w['rank']}): the measured step, each finding's claimed time, "
                        "the projected step", style="bold"))
    for line in waterfall.bar_lines(w):
        console.print(plain("  " + line))


def _findings(d: dict, console: Console) -> None:
    console.print()
    if not d["findings"]:
        console.print(Text("No problems found.", style="bold green"))
        return
    console.print(Text(f"Findings ({len(d['findings'])})", style="bold"))
    for f in d["findings"]:
        head = Text()
        head.append(plain(f"[{f['severity']}] ", style=SEV_STYLE.get(f["severity"], "")))
        head.append(plain(f"{f['id']}: ", style="bold"))
        head.append(plain(sections.title(f)))
        console.print(head)
        console.print(plain("  " + sections.finding_meta(f)))
        for line in sections.finding_notes(f):
            console.print(plain("  " + line, style="dim"))
        for line in sections.evidence_lines(f, limit=12, width=110, items=2):
            console.print(plain("  " + line, style="dim"))
        console.print(plain("  fix:"))
        for line in sections.fix_lines(f):
            console.print(plain("    " + line, style="green"))


def _ranks(d: dict, console: Console) -> None:
    for r in d["ranks"]:
        console.print()
        console.print(plain(sections.rank_title(r), style="bold"))
        console.print(_step_table(r))
        for note in sections.rank_notes(r):
            console.print(plain(note, style="dim"))
    for note in sections.footnotes(d):
        console.print(plain(note, style="dim"))
    if d.get("missing_ranks"):
        console.print()
        console.print(plain(f"Missing ranks (no usable trace file): {fmt.ranges(d['missing_ranks'])}", style="bold"))


def _throughput(d: dict, console: Console) -> None:
    if not throughput.has_any(d):
        return
    console.print()
    console.print(plain("Throughput, FLOPs and MFU (docs/metrics.md)", style="bold"))
    for line in throughput.job_lines(d):
        console.print(plain("  " + line))
    for r in d["ranks"]:
        lines = throughput.rank_lines(r)
        if lines:
            console.print(plain(f"  rank {r['rank']}:"))
            for line in lines:
                console.print(plain("    " + line))
        rows = throughput.roofline_rows(r)
        if rows:
            t = Table(show_edge=False, pad_edge=False, box=None, header_style="bold", padding=(0, 0, 0, 1))
            for i, h in enumerate(throughput.ROOFLINE_HEAD):  # op and shapes cut to one line: the JSON has them whole
                t.add_column(h, justify="left" if i < 3 else "right", no_wrap=True, overflow="ellipsis",
                             max_width={0: 22, 1: 24}.get(i), min_width=None if i < 2 else len(h))
            for row in rows:
                t.add_row(*(plain(c) for c in row))
            console.print(t)


def _utilization(d: dict, console: Console) -> None:
    lines = [(r["rank"], sections.utilization(r)) for r in d["ranks"]]
    lines = [(rk, u) for rk, u in lines if u]
    if not lines:
        return
    console.print()
    console.print(plain("nvidia-smi view (what GPU-Util would have shown, docs/utilization.md)", style="bold"))
    for rk, u in lines:
        console.print(plain(f"  rank {rk}: {u}"))


def _memory(d: dict, console: Console) -> None:
    from . import memory as mem

    lines = [(r, mem.headline(r)) for r in d["ranks"]]
    lines = [(r, h) for r, h in lines if h]
    missing = mem.not_recorded(d)
    if missing:
        console.print()
        console.print(plain(f"Memory: {missing}", style="dim"))
    if not lines:
        return
    console.print()
    console.print(plain("Memory (docs/memory.md)", style="bold"))
    for r, h in lines:
        console.print(plain(f"  {h}"))
        m = r.get("memory")
        if not m:
            continue
        for head, rows in ((mem.STEP_HEAD, mem.step_rows(m)), (mem.HOLDER_HEAD, mem.holder_rows(m, 6)),
                           (mem.PREDICT_HEAD, mem.predict_rows(m))):
            if not rows:
                continue
            t = Table(show_edge=False, pad_edge=False, box=None, header_style="bold", padding=(0, 0, 0, 2))
            for i, h2 in enumerate(head):
                t.add_column(h2, justify="left" if i < (3 if head is mem.HOLDER_HEAD else 1) else "right")
            for row in rows:
                t.add_row(*(plain(c) for c in row))
            console.print(t)
        for n in (mem.accumulation_line(m), mem.note(m)):
            if n:
                console.print(plain(f"  {n}", style="dim"))


def _cost(d: dict, console: Console) -> None:
    from . import memory as mem

    costs = [c for c in (mem.cost_line(r) for r in d["ranks"]) if c]
    tables = [(mem.tradeoff_title(r), mem.tradeoff_rows(r)) for r in d["ranks"]]
    tables = [(t, rows) for t, rows in tables if t and rows]
    if not costs and not tables:
        return
    console.print()
    console.print(plain("Cost and the batch x accumulation trade-off (docs/metrics.md)", style="bold"))
    for c in costs:
        console.print(plain(f"  {c}"))
    for title, rows in tables:
        console.print(plain(f"  {title}"))
        t = Table(show_edge=False, pad_edge=False, box=None, header_style="bold", padding=(0, 0, 0, 2))
        for i, h in enumerate(mem.TRADEOFF_HEAD):
            t.add_column(h, justify="left" if i in (0, len(mem.TRADEOFF_HEAD) - 1) else "right")
        for row in rows:
            t.add_row(*(plain(c) for c in row))
        console.print(t)


def render(d: dict, console: Console) -> None:
    n = d.get("ranks_analyzed", len(d["ranks"]))
    world = d.get("world_size")
    console.print(plain(f"traceinspect report: {sections.source(d)}", style="bold"))
    console.print(plain(f"{n} of {world or n} ranks analyzed" + (f" (world size {world})" if world else "")))
    for line in sections.runs_lines(d):  # several runs, windows or copies in the folder (docs/folders.md)
        console.print(plain(line))
    console.print(plain("Verdict: " + verdict(d), style="bold"))
    if sections.communication(d):
        console.print(plain("Communication: " + sections.communication(d)))
    _waterfall(d, console)
    _findings(d, console)
    _ranks(d, console)
    _throughput(d, console)
    _utilization(d, console)
    _memory(d, console)
    _cost(d, console)
    if d.get("errors"):
        console.print()
        for e in sections.errors(d):
            console.print(plain(f"analysis error: {e}", style="red"))
    if d["skipped"]:
        console.print()
        console.print(plain(f"Skipped files ({len(d['skipped'])})", style="bold"))
        for line in sections.skipped(d):
            console.print(plain(f"  {line}"))


def render_text(d: dict, width: int = 120, color: bool = False) -> str:
    buf = io.StringIO()
    render(d, console_for(buf, width, color))
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
