"""The Markdown report, from the JSON report dict: the terminal report's sections, as Markdown.

Sections in ``vocabulary.SECTIONS`` order: verdict, waterfall, findings, per-step tables, nvidia-smi view, skipped
files; words and numbers from ``sections`` and ``format``, like every renderer.
"""

from __future__ import annotations

from . import format as fmt, sections, waterfall


def _cell(x: str) -> str:
    return str(x).replace("|", "\\|")


def table(head: list[str], rows: list[list[str]], aligns: list[str] | None = None) -> list[str]:
    """A Markdown table; ``aligns`` per column (default: the first left, numbers right)."""
    aligns = aligns or ["---"] + ["---:"] * (len(head) - 1)
    out = ["| " + " | ".join(_cell(h) for h in head) + " |", "|" + "|".join(aligns) + "|"]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out + [""]


def waterfall_lines(d: dict) -> list[str]:
    w = waterfall.rows(d)
    if w is None:
        return []
    rows = [["measured step", fmt.ms(w["step_us"]), ""]]
    rows += [[f"`{c['id']}`" + (f" after `{c['after']}`" if c.get("after") else ""),
              fmt.signed_ms(-c["us"]), c["title"]] for c in w["claims"]]
    rows += [["projected step", fmt.ms(w["projected_step_us"]), "every finding above fixed"]]
    return ([f"## Where the step could go (rank {w['rank']})", ""] + table(["", "per step", "finding"], rows, ["---", "---:", "---"])
            + ["```text"] + waterfall.bar_lines(w) + ["```", ""])


def finding_lines(f: dict) -> list[str]:
    out = [f"### `{f['id']}` ({f['severity']}): {f['title']}", "", sections.finding_meta(f).capitalize() + ".", ""]
    notes = sections.finding_notes(f)
    out += [f"*{n}*" for n in notes] + ([""] if notes else [])
    cols, rows, left, rest = sections.evidence_rows(f)
    if cols:
        out += table(["evidence"] + cols, [[k] + vals for k, vals in rows])
        if left:
            out += [f"(and {fmt.count(left, 'more rank')} in the JSON report)", ""]
    out += [f"- {k}: {v}" for k, v in rest]
    if rest:
        out.append("")
    return out + ["Fix:", "", "```python", f["fix"], "```", ""]


def render_markdown(d: dict, plots: list[str] | None = None) -> str:
    """The report as Markdown; ``plots``: PNG file names beside the .md file to show after the findings' summary."""
    n = d.get("ranks_analyzed", len(d["ranks"]))
    world = d.get("world_size")
    out = ["# traceinspect report", "", f"Source: `{d['source']}`", "",
           f"{n} of {world or n} ranks analyzed." + (f" World size {world}." if world else ""), ""]
    runs = sections.runs_lines(d)
    if runs:
        out += ["Runs: " + runs[0], ""] + [f"- {line.strip()}" for line in runs[1:]] + ([""] if runs[1:] else [])
    out += [f"**Verdict:** {sections.verdict(d)}", ""]
    out += waterfall_lines(d)
    if plots:
        out += ["## Plots", ""] + [f"![{p.rsplit('.', 1)[0].replace('_', ' ')}]({p})" for p in plots] + [""]
    out += [f"## Findings ({len(d['findings'])})", ""]
    if not d["findings"]:
        out += ["No problems found.", ""]
    for f in d["findings"]:
        out += finding_lines(f)
    out += ["## Ranks and steps", ""]
    for r in d["ranks"]:
        out += [f"### {sections.rank_title(r)}", ""]
        out += table(sections.step_header(r), [sections.step_cells(r, s) for s in sections.shown_steps(r["steps"])])
        for note in sections.rank_notes(r):
            out += [note, ""]
    out += [f"{x}" for x in sections.footnotes(d)] + ([""] if sections.footnotes(d) else [])
    if d.get("missing_ranks"):
        out += [f"Missing ranks (no usable trace file): {fmt.ranges(d['missing_ranks'])}", ""]
    util = [(r["rank"], sections.utilization(r)) for r in d["ranks"]]
    util = [(rk, u) for rk, u in util if u]
    if util:
        out += ["## nvidia-smi view", "", "What GPU-Util would have shown (docs/utilization.md).", ""]
        out += [f"- rank {rk}: {u}" for rk, u in util] + [""]
    if d.get("errors"):
        out += ["## Analysis errors", ""] + [f"- {e}" for e in d["errors"]] + [""]
    if d["skipped"]:
        out += [f"## Skipped files ({len(d['skipped'])})", ""]
        out += [f"- `{s['file']}`: {s['reason']}" for s in d["skipped"]] + [""]
    return "\n".join(out)
