"""``traceinspect diff --markdown`` and ``--html``: the step-time change, the verdict, and work and rate side by
side (formatting only: every number comes from the typed diff document, ``report/diff_doc.py``). Names from traces
are escaped: Markdown by ``safe.markdown`` (CommonMark's escapes) and code spans, HTML by ``html.escape``."""

from __future__ import annotations

import html
from itertools import zip_longest

from ..report.diff_doc import DiffDoc, check
from . import safe
from .diff_figures import FIGURES_HEAD, figure_cells, per_sample_line, unknown_lines
from .diff_text import captures
from .diff_work_text import (SAME_SHAPE_HEAD, name_lines, plain, rate_cells, runs_line, same_shape_cells, signed_ms,
                             work_cells)
from .document import given


def md(s, cell: bool = False) -> str:
    return safe.markdown(plain(s), cell=cell)


def _step_line(dd: DiffDoc) -> str:
    o = dd.overall
    if o is None or o.delta_us is None:
        return "Step time: not on both sides"
    sig = {True: "beyond the noise", False: "within the noise", None: "noise unknown"}[o.significant]
    rel = f" ({100 * o.rel_change:+.1f} %)" if o.rel_change is not None else ""
    return (f"Step time: {o.base.mean_us / 1000:.2f} ms -> {o.new.mean_us / 1000:.2f} ms, "
            f"{signed_ms(o.delta_us)}{rel}, {sig}")


def _side_by_side(dd: DiffDoc) -> list[list[str]]:
    blank_w, blank_r = [""] * 4, [""] * 5
    return [(w or blank_w) + (r or blank_r) for w, r in zip_longest(work_cells(dd), rate_cells(dd))]


def render_diff_markdown(dd: DiffDoc | dict) -> str:
    dd = check(dd)
    lines = ["# traceinspect diff", ""]
    for side, srcs in captures(dd).items():
        lines.append(f"- {side}: " + ", ".join(safe.code_span(plain(s)) for s in srcs))
    lines += ["", md(_step_line(dd)), ""]
    v = given(dd.verdict)
    if v is not None:
        lines += [f"**Verdict ({md(v.kind)})**: {md(v.text)}", ""]
    if runs_line(dd):
        lines += [md(runs_line(dd)), ""]
    g = given(dd.gate)
    if g is not None:
        lines += [f"**Regression gate ({g.pct:g} %)**: {'tripped' if g.tripped else 'passed'}"]
        lines += [f"- {md(r)}" for r in g.reasons] + [""]
    figures = figure_cells(dd)
    if figures:
        lines += ["## Throughput, MFU, GPU-hours and memory", "",
                  "| " + " | ".join(FIGURES_HEAD) + " |", "| --- | ---: | ---: | ---: | --- |"]
        lines += ["| " + " | ".join(md(c, cell=True) for c in row) + " |" for row in figures]
        notes = unknown_lines(dd) + [x for x in (per_sample_line(dd),) if x]
        lines += [""] + [f"- {md(n)}" for n in notes] + [""] if notes else [""]
    lines += ["## Work and rate, per step", "",
              "| work | base | new | | rate | base | new | change | effect/step |",
              "| --- | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: |"]
    lines += ["| " + " | ".join(md(c, cell=True) for c in row) + " |" for row in _side_by_side(dd)]
    same = same_shape_cells(dd)
    if same:
        lines += ["", "## GPU time per kernel of the same name and shape", "",
                  "| " + " | ".join(SAME_SHAPE_HEAD) + " |", "| --- | --- | ---: | ---: | ---: | ---: |"]
        lines += ["| " + " | ".join(md(c, cell=True) for c in row) + " |" for row in same]
    names = name_lines(dd)
    if names:
        lines += ["", "## By name", ""] + [f"- {md(' '.join(plain(n).split()))}" for n in names]
    return "\n".join(lines) + "\n"


_STYLE = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-right:2em}"
          "td,th{padding:2px 8px;border-bottom:1px solid #ddd}td.n{text-align:right}.row{display:flex;"
          "flex-wrap:wrap}.changed{color:#b00}pre{background:#f6f6f6;padding:.5em}")


def _table(caption: str, head: list[str], rows: list[list[str]]) -> str:
    e = html.escape
    out = [f"<table><caption>{e(caption)}</caption><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>"]
    for r in rows:
        cells = [f"<td>{e(r[0])}</td>"] + [f'<td class="n {e(c)}">{e(c)}</td>' for c in r[1:]]
        out.append("<tr>" + "".join(cells) + "</tr>")
    return "".join(out) + "</table>"


def render_diff_html(dd: DiffDoc | dict) -> str:
    dd = check(dd)
    e = lambda s: html.escape(plain(s))  # noqa: E731
    parts = ["<!doctype html>", '<html><head><meta charset="utf-8"><title>traceinspect diff</title>',
             f"<style>{_STYLE}</style></head><body>", "<h1>traceinspect diff</h1>", "<ul>"]
    for side, srcs in captures(dd).items():
        parts.append(f"<li>{side}: {', '.join(e(s) for s in srcs)}</li>")
    parts += ["</ul>", f"<p>{e(_step_line(dd))}</p>"]
    v = given(dd.verdict)
    if v is not None:
        parts.append(f"<p><b>Verdict ({e(v.kind)})</b>: {e(v.text)}</p>")
    if runs_line(dd):
        parts.append(f"<p>{e(runs_line(dd))}</p>")
    g = given(dd.gate)
    if g is not None:
        parts.append(f"<p><b>Regression gate ({g.pct:g} %)</b>: {'tripped' if g.tripped else 'passed'}</p><ul>"
                     + "".join(f"<li>{e(r)}</li>" for r in g.reasons) + "</ul>")
    figures = figure_cells(dd)
    if figures:
        parts.append("<h2>Throughput, MFU, GPU-hours and memory</h2>"
                     + _table("the compared ranks (and the job), base against new", FIGURES_HEAD, figures))
        notes = unknown_lines(dd) + [x for x in (per_sample_line(dd),) if x]
        if notes:
            parts.append("<ul>" + "".join(f"<li>{e(n)}</li>" for n in notes) + "</ul>")
    parts.append('<div class="row">' + _table("what it did, per step", ["work", "base", "new", ""], work_cells(dd))
                 + _table("how fast", ["rate", "base", "new", "change", "effect/step"], rate_cells(dd)) + "</div>")
    same = same_shape_cells(dd)
    if same:
        parts.append(_table("GPU time per kernel of the same name and shape", SAME_SHAPE_HEAD, same))
    names = name_lines(dd)
    if names:
        parts.append("<h2>By name</h2><pre>" + "\n".join(e(n) for n in names) + "</pre>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
