"""The Markdown report, from the typed report document: the terminal report's sections, as Markdown.

Sections in ``vocabulary.SECTIONS`` order: verdict, waterfall, findings, per-step tables, nvidia-smi view, skipped
files; words and numbers from ``sections`` and ``format``, like every renderer. Every string is written through
``safe.markdown`` (or as a code span or fenced block whose fence it cannot close): a name holding HTML, a newline
and ``# heading``, a pipe or backticks shows as written and cannot add a heading, a list item or a table row.
"""

from __future__ import annotations

from ..report.doc import FindingDoc, ReportDoc
from . import format as fmt, safe, sections, throughput, waterfall
from .document import given, report_doc

md = safe.markdown
code = safe.code_span


def cell(text) -> str:
    """Plain text as a table cell (inline: no block marker to escape)."""
    return safe.markdown(text, cell=True)


def table(head: list[str], rows: list[list[str]], aligns: list[str] | None = None) -> list[str]:
    """A Markdown table of plain-text cells (escaped here); ``aligns`` per column (default: the first left, numbers
    right)."""
    aligns = aligns or ["---"] + ["---:"] * (len(head) - 1)
    return _table([cell(h) for h in head], [[cell(c) for c in row] for row in rows], aligns)


def waterfall_lines(d: ReportDoc) -> list[str]:
    w = waterfall.rows(d)
    if w is None:
        return []
    rows = [["measured step", fmt.ms(w.step_us), ""]]
    rows += [[code(c.id) + (f" after {code(c.after)}" if c.after else ""),
              fmt.signed_ms(-c.us), cell(safe.words(c.title))] for c in w.claims]
    rows += [["projected step", fmt.ms(w.projected_step_us), "every finding above fixed"]]
    head = [f"## Where the step could go (rank {w.rank})", ""]
    return (head + _table(["", "per step", "finding"], rows, ["---", "---:", "---"])
            + safe.code_fence([safe.visible(x) for x in waterfall.bar_lines(w)], "text") + [""])


def _table(head: list[str], rows: list[list[str]], aligns: list[str]) -> list[str]:
    """A table of cells already written as Markdown."""
    return ["| " + " | ".join(head) + " |", "|" + "|".join(aligns) + "|"] + [
        "| " + " | ".join(row) + " |" for row in rows] + [""]


def finding_lines(f: FindingDoc) -> list[str]:
    out = [f"### {code(f.id)} ({md(f.severity)}): {md(sections.title(f))}", "",
           md(sections.finding_meta(f).capitalize() + "."), ""]
    notes = sections.finding_notes(f)
    out += [f"*{md(n)}*" for n in notes] + ([""] if notes else [])
    cols, rows, left, rest = sections.evidence_rows(f)
    if cols:
        out += table(["evidence"] + cols, [[k] + vals for k, vals in rows])
        if left:
            out += [f"(and {fmt.count(left, 'more rank')} in the JSON report)", ""]
    out += [f"- {md(k)}: {md(v)}" for k, v in rest]
    if rest:
        out.append("")
    return out + ["Fix:", ""] + safe.code_fence(sections.fix_lines(f), "python") + [""]


def _memory(d: ReportDoc) -> list[str]:
    from . import memory as mem

    ranks = [(r, mem.headline(r)) for r in d.ranks]
    ranks = [(r, h) for r, h in ranks if h]
    missing = mem.not_recorded(d)
    if missing:
        return ["## Memory", "", md(missing), ""]
    if not ranks:
        return []
    out = ["## Memory", ""]
    for r, h in ranks:
        out += [md(h), ""]
        m = given(r.memory)
        if m is None:
            continue
        for head, rows, _, under in mem.tables(m):
            out += table(head, rows) + ([md(under) + "\n"] if under else [])
        out += [md(n) + "\n" for n in mem.notes(m)]
    return out


def _cost(d: ReportDoc) -> list[str]:
    from . import memory as mem

    costs = [c for c in (mem.cost_line(r) for r in d.ranks) if c]
    tables = [(mem.tradeoff_title(r), mem.tradeoff_rows(r)) for r in d.ranks]
    tables = [(t, rows) for t, rows in tables if t and rows]
    if not costs and not tables:
        return []
    out = ["## Cost and the batch x accumulation trade-off", ""] + [f"- {md(c)}" for c in costs] + [""]
    for title, rows in tables:
        out += [md(title), ""] + table(mem.TRADEOFF_HEAD, rows)
    return out


def render_markdown(doc: ReportDoc | dict, plots: list[str] | None = None) -> str:
    """The report as Markdown; ``plots``: PNG file names beside the .md file to show after the findings' summary."""
    d = report_doc(doc)
    n, world = d.ranks_analyzed, d.world_size
    out = ["# traceinspect report", "", f"Source: {code(sections.source(d))}", "",
           f"{n} of {world or n} ranks analyzed." + (f" World size {world}." if world else ""), ""]
    runs = sections.runs_lines(d)
    if runs:
        out += ["Runs: " + md(runs[0]), ""] + [f"- {md(line.strip())}" for line in runs[1:]] + ([""] if runs[1:] else [])
    out += [f"**Verdict:** {md(sections.verdict(d))}", ""]
    if sections.communication(d):
        out += [f"Communication: {md(sections.communication(d))}", ""]
    out += waterfall_lines(d)
    if plots:
        out += ["## Plots", ""] + [f"![{p.rsplit('.', 1)[0].replace('_', ' ')}]({p})" for p in plots] + [""]
    out += [f"## Findings ({len(d.findings)})", ""]
    if not d.findings:
        out += ["No problems found.", ""]
    for f in d.findings:
        out += finding_lines(f)
    out += ["## Ranks and steps", ""]
    for r in d.ranks:
        out += [f"### {md(sections.rank_title(r))}", ""]
        out += table(sections.step_header(r), [sections.step_cells(r, s) for s in sections.shown_steps(r.steps)])
        for note in sections.rank_notes(r):
            out += [md(note), ""]
    out += [md(x) for x in sections.footnotes(d)] + ([""] if sections.footnotes(d) else [])
    if d.missing_ranks:
        out += [f"Missing ranks (no usable trace file): {fmt.ranges(d.missing_ranks)}", ""]
    out += throughput_lines(d)
    util = [(r.rank, sections.utilization(r)) for r in d.ranks]
    util = [(rk, u) for rk, u in util if u]
    if util:
        out += ["## nvidia-smi view", "", "What GPU-Util would have shown (docs/utilization.md).", ""]
        out += [f"- rank {rk}: {md(u)}" for rk, u in util] + [""]
    out += _memory(d)
    out += _cost(d)
    if d.errors:
        out += ["## Analysis errors", ""] + [f"- {md(e)}" for e in sections.errors(d)] + [""]
    if d.skipped:
        out += [f"## Skipped files ({len(d.skipped)})", ""]
        out += [f"- {code(safe.path(s.file))}: {md(safe.path(s.reason))}" for s in d.skipped] + [""]
    return "\n".join(out)


def throughput_lines(d: ReportDoc) -> list[str]:
    """The throughput section: the job's and each rank's figures, and each rank's roofline table."""
    if not throughput.has_any(d):
        return []
    out = ["## Throughput, FLOPs and MFU", "", "Definitions: docs/metrics.md.", ""]
    out += [f"- {md(line)}" for line in throughput.job_lines(d)] + ([""] if throughput.job_lines(d) else [])
    for r in d.ranks:
        lines = throughput.rank_lines(r)
        if lines:
            out += [f"Rank {r.rank}:", ""] + [f"- {md(line)}" for line in lines] + [""]
        rows = throughput.roofline_rows(r)
        if rows:
            out += table(throughput.ROOFLINE_HEAD, rows, ["---"] * 3 + ["---:"] * (len(throughput.ROOFLINE_HEAD) - 3))
    return out
