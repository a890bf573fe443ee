"""A self-contained HTML report (one file: CSS inline, plots as base64 PNGs), from the report document.

Sections in ``vocabulary.SECTIONS`` order: verdict, waterfall, findings, per-step tables, nvidia-smi view, skipped
files, like the terminal and Markdown reports, with the same words and numbers (``sections``, ``format``). Plots come
from the document alone, so a saved report.json renders the same page. Renderers format; they do not compute.

The page is ``templates/report.html.j2`` (its CSS ``templates/report.css``), rendered by jinja2 with autoescape:
this module hands it plain strings (``sections``, ``format``, ``safe``), never HTML, so a name holding ``<script>``,
``</script>`` or a quote is text wherever it lands. The page has no script and a Content-Security-Policy that lets
it fetch nothing (inline styles and ``data:`` images only).
"""

from __future__ import annotations

import base64
import functools

import jinja2

from ..report.doc import FindingDoc, RankDoc, ReportDoc
from . import format as fmt, safe, sections, throughput as thr, waterfall
from .document import given, report_doc
from .vocabulary import SYNTHETIC_NOTE, breakdown, color as _color

MAX_EVIDENCE_RANKS = 8  # per-rank evidence columns shown; the rest are in the JSON report

_FIGURE_CAPTIONS = {
    "waterfall": "From the measured step, each finding's claimed time per step (disjoint, so they add up), down to the "
                 "projected step with every finding fixed.",
    "step_breakdown": "Where each step's time goes, per rank and step: the stack adds up to the step's wall time.",
    "timeline": "One step's GPU activity at true scale (the median-wall step): the top lane is the GPU as the "
                "breakdown counts it (its colours add up to the breakdown), the lanes below are the streams. Each "
                "column is filled to the share of its time a category runs; short events are short columns, never "
                "widened. Triangles mark pageable copies.",
    "message_sizes": "Size of every collective call against the DDP bucket cap: many calls far below the cap are "
                     "latency-bound; one call per bucket is the goal.",
    "ranks": "Ranks side by side: the straggler is the rank the others wait for (less waiting, more of the cause).",
    "tradeoff": "The logical batch as physical batch x accumulation steps, predicted from this trace: the time per "
                "logical batch above, the peak memory below against the device's capacity; the run's configuration "
                "and the fastest option known to fit are marked (docs/metrics.md, \"The trade-off table\").",
}


def _cell(key: str, v, units: dict[str, str]) -> dict:
    """One evidence value in its declared unit (``units``: ``fmt.units_of``): a list of records as a small table of
    labelled, formatted values; else its text."""
    if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
        cols = list(dict.fromkeys(k for x in v for k in x))
        rows = [[fmt.value(c, x.get(c), units=units) for c in cols] for x in v[:10]]
        return {"table": {"head": [fmt.label(c) for c in cols], "rows": rows, "more": max(len(v) - 10, 0)}}
    return {"text": fmt.value(key, v, units=units)}


def _evidence(f: FindingDoc) -> dict | None:
    """Labelled values with units: one table, headed "evidence", a column per rank (or one value column)."""
    ev = f.evidence
    per_rank = f.per_rank_evidence()
    ranks = per_rank[:MAX_EVIDENCE_RANKS] if per_rank else None
    skip = ("steps", "rank")
    if ranks:
        cols = [f"rank {sections.rank_of(x)}" for x in ranks]
        keys = [k for k in dict.fromkeys(k for x in ranks for k in x) if k not in skip]
        rows = [(k, [x.get(k) for x in ranks]) for k in keys]
        rest = [(k, v) for k, v in ev.items() if k not in skip + ("per_rank",) and v is not None]
    else:
        cols = ["value"]
        rows = [(k, [v]) for k, v in ev.items() if k not in skip and v is not None]
        rest = []
    if not rows and not rest:
        return None
    left = len(per_rank) - len(ranks) if ranks else 0
    units = fmt.units_of(f.id)  # the units the finding's rule declares for its evidence fields
    return {"cols": cols,
            "rows": [{"label": fmt.label(k), "cells": [_cell(k, v, units) for v in vals]} for k, vals in rows],
            "rest": [{"label": fmt.label(k), "cell": _cell(k, v, units)} for k, v in rest],
            "more": fmt.count(left, "more rank") if left else ""}


def _finding(f: FindingDoc) -> dict:
    at = f.time_at_stake_us
    return {"severity": f.severity, "id": f.id, "title": sections.title(f),
            "at_stake": fmt.ms(at) if at else "-", "meta": sections.finding_meta(f),
            "notes": sections.finding_notes(f), "docs": f.docs, "evidence": _evidence(f),
            "fix": "\n".join(sections.fix_lines(f))}


def _rank(r: RankDoc, colors) -> dict:
    keys = [k for k, _s, _l in breakdown(r.basis)]
    head = sections.step_header(r)
    swatches = [None, None] + [colors(k) for k in keys] + [None] * (len(head) - 2 - len(keys))
    rows = []
    for s in sections.shown_steps(r.steps):
        wall = s.wall_us or 0
        bd = s.breakdown_us
        bar = [{"width": f"{100 * bd[k] / wall:.3f}", "colour": colors(k), "key": k}
               for k in keys if wall and (bd.get(k) or 0) > 0]
        rows.append({"cells": sections.step_cells(r, s), "bar": bar})
    return {"rank": r.rank, "title": sections.rank_title(r), "rows": rows, "notes": sections.rank_notes(r),
            "head": [{"text": h, "colour": c} for h, c in zip(head, swatches)]}


def _waterfall(d: ReportDoc) -> dict | None:
    w = waterfall.rows(d)
    if w is None:
        return None
    step = w.step_us or 1.0

    def bar(lo: float, hi: float, colour: str, value: str, **names) -> dict:
        return {"left": f"{100 * lo / step:.3f}", "width": f"{max(100 * (hi - lo) / step, 0.2):.3f}",
                "colour": colour, "value": value, "id": None, "after": None, "label": "", **names}

    bars = [bar(0, w.step_us, "#5F6368", fmt.ms(w.step_us), label="measured step")]
    bars += [bar(c.from_us - c.us, c.from_us, waterfall.SEVERITY_COLORS.get(c.severity, "#0B57D0"),
                 fmt.signed_ms(-c.us), id=c.id, after=c.after) for c in w.claims]
    bars.append(bar(0, w.projected_step_us, "#137333", fmt.ms(w.projected_step_us), label="projected step"))
    return {"rank": w.rank, "bars": bars}


def _memory(d: ReportDoc) -> list[dict]:
    """Per rank with memory events: its headline, the per-step table, what holds the peak, the predictions."""
    from . import memory as mem

    missing = mem.not_recorded(d)
    out = [{"headline": f"Memory: {missing}", "tables": [], "notes": []}] if missing else []
    for r in d.ranks:
        m = given(r.memory)
        line = mem.headline(r)
        if not line or missing:
            continue
        tables = []
        if m is not None:
            tables = [{"head": mem.STEP_HEAD, "rows": mem.step_rows(m)},
                      {"head": mem.HOLDER_HEAD, "rows": mem.holder_rows(m)}]
            if m.predicted:
                tables.append({"head": mem.PREDICT_HEAD, "rows": mem.predict_rows(m)})
        notes = [x for x in (mem.steps_note(m), *mem.notes(m)) if x] if m else []
        out.append({"headline": line, "tables": tables, "notes": notes})
    for r in d.ranks:  # cost and the trade-off table
        title, rows, cost = mem.tradeoff_title(r), mem.tradeoff_rows(r), mem.cost_line(r)
        if cost or (title and rows):
            out.append({"headline": cost or "", "tables": [{"head": mem.TRADEOFF_HEAD, "rows": rows}] if rows else [],
                        "notes": [title] if title and rows else []})
    return out
def _throughput(d: ReportDoc) -> dict | None:
    """The throughput section: the job's line, and per rank its figures and roofline rows (``render/throughput``)."""
    if not thr.has_any(d):
        return None
    ranks = [{"rank": r.rank, "lines": thr.rank_lines(r), "rows": thr.roofline_rows(r)} for r in d.ranks]
    return {"job": thr.job_lines(d), "head": thr.ROOFLINE_HEAD, "ranks": [x for x in ranks if x["lines"]]}


def _plots(d: ReportDoc) -> list[dict]:
    from .plots import figures, png_bytes

    return [{"name": name, "alt": f"{name.replace('_', ' ')} plot", "caption": _FIGURE_CAPTIONS.get(name, ""),
             "data": base64.b64encode(png_bytes(fig)).decode("ascii")} for name, fig in figures(d).items()]


@functools.lru_cache(maxsize=1)
def _template():
    env = jinja2.Environment(loader=jinja2.PackageLoader("traceinspect.render", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.get_template("report.html.j2")


def render_html(doc: ReportDoc | dict) -> str:
    """The page, from the document alone."""
    d = report_doc(doc)
    n, world, findings = d.ranks_analyzed, d.world_size, d.findings
    util = [(r.rank, sections.utilization(r)) for r in d.ranks]
    return _template().render(
        source=sections.source(d),
        analyzed=f"{n} of {world or n} ranks analyzed" + (f" (world size {world})" if world else ""),
        runs=[line.strip() for line in sections.runs_lines(d)],
        top=findings[0].severity if findings else "ok",
        verdict=sections.verdict(d),
        communication=sections.communication(d) or "",
        waterfall=_waterfall(d),
        findings=[_finding(f) for f in findings],
        plots=_plots(d),
        ranks=[_rank(r, _color) for r in d.ranks],
        synthetic_note=SYNTHETIC_NOTE if sections.any_synthetic(d) else "",
        missing_ranks=fmt.ranges(d.missing_ranks) if d.missing_ranks else "",
        utilization=[(rk, u) for rk, u in util if u],
        memory=_memory(d),
        throughput=_throughput(d),
        skipped=[(safe.path(s.file), safe.path(s.reason)) for s in d.skipped],
        errors=sections.errors(d),
        schema=d.schema,
    )
