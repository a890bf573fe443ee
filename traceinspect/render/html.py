"""A self-contained HTML report (one file: CSS inline, plots as base64 PNGs), from the report document.

Sections in ``vocabulary.SECTIONS`` order: verdict, waterfall, findings, per-step tables, nvidia-smi view, skipped
files, like the terminal and Markdown reports, with the same words and numbers (``sections``, ``format``). Plots come
from the document alone, so a saved report.json renders the same page. Renderers format; they do not compute.
"""

from __future__ import annotations

import base64
import html

from . import format as fmt, sections, waterfall
from .vocabulary import SYNTHETIC_NOTE, breakdown, color as _color

MAX_EVIDENCE_RANKS = 8  # per-rank evidence columns shown; the rest are in the JSON report

_CSS = """
:root { --fg: #1d1d1f; --muted: #5f6368; --line: #dadce0; --bg: #ffffff; --panel: #f6f8fa;
        --critical: #b00020; --warning: #b26a00; --info: #0b57d0; --ok: #137333; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 -apple-system, "Segoe UI", Roboto, "DejaVu Sans", Arial, sans-serif;
       color: var(--fg); background: var(--bg); }
main { max-width: 1440px; margin: 0 auto; padding: 24px 28px 48px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 19px; margin: 32px 0 10px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
h3 { font-size: 16px; margin: 0 0 6px; }
code, pre { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 12.5px; }
.src { color: var(--muted); margin: 0 0 12px; word-break: break-all; }
.verdict { font-size: 16px; font-weight: 600; padding: 12px 16px; border-radius: 6px; background: var(--panel);
           border-left: 6px solid var(--ok); }
.verdict.critical { border-left-color: var(--critical); } .verdict.warning { border-left-color: var(--warning); }
.verdict.info { border-left-color: var(--info); }
nav { margin: 14px 0 0; color: var(--muted); } nav a { color: var(--info); margin-right: 14px; text-decoration: none; }
.finding { border: 1px solid var(--line); border-left: 6px solid var(--info); border-radius: 6px; padding: 12px 16px;
           margin: 0 0 14px; }
.finding.critical { border-left-color: var(--critical); } .finding.warning { border-left-color: var(--warning); }
.badge { display: inline-block; font-size: 11px; font-weight: 700; text-transform: uppercase; letter-spacing: .04em;
         color: #fff; background: var(--info); border-radius: 3px; padding: 1px 6px; vertical-align: 2px; }
.badge.critical { background: var(--critical); } .badge.warning { background: var(--warning); }
.meta { color: var(--muted); margin: 0 0 8px; }
pre.fix { background: #0f1720; color: #e6edf3; padding: 10px 12px; border-radius: 5px; overflow-x: auto; margin: 4px 0 0; }
table { border-collapse: collapse; margin: 6px 0 10px; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 8px; text-align: right; vertical-align: top; }
th { background: var(--panel); font-weight: 600; }
th:first-child, td:first-child { text-align: left; }
table.kv td:first-child, table.evidence td:first-child { font-family: "DejaVu Sans Mono", Menlo, monospace;
           font-size: 12px; color: var(--muted); }
table.nested { margin: 0; font-size: 12px; } table.nested th, table.nested td { padding: 1px 6px; }
table.nested td:first-child { max-width: 460px; overflow-wrap: anywhere; }
table.evidence > tbody > tr > td:first-child { white-space: nowrap; }
table.nested td, table.nested th { text-align: left; }
.scroll { overflow-x: auto; max-width: 100%; }
table.summary td, table.summary th { text-align: left; } table.summary td.num, table.summary th.num { text-align: right; }
table.summary td:nth-child(-n+2), table.summary td.num { white-space: nowrap; }
table.summary a { color: var(--fg); }
table.steps th { white-space: nowrap; } table.steps th, table.steps td { padding: 3px 5px; }
.unit { color: var(--muted); font-size: 12px; }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 4px; vertical-align: 0; }
.bar { display: flex; width: 110px; height: 12px; border-radius: 2px; overflow: hidden; background: #eee; }
.bar span { display: block; height: 100%; }
.wf { position: relative; width: 420px; height: 14px; background: #f1f3f4; border-radius: 2px; }
.wf span { position: absolute; top: 0; height: 100%; border-radius: 2px; }
table.waterfall td.num, table.waterfall th.num { text-align: right; white-space: nowrap; }
figure { margin: 0 0 22px; } figure img { max-width: 100%; height: auto; border: 1px solid var(--line); }
figcaption { color: var(--muted); font-size: 13px; margin-top: 4px; }
.note { color: var(--muted); }
.error { color: var(--critical); }
footer { margin-top: 40px; color: var(--muted); font-size: 12px; }
"""

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
}


def esc(x) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def _cell(key: str, v) -> str:
    """One evidence value: a list of records as a small table of labelled, formatted values; else its text."""
    if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
        cols = list(dict.fromkeys(k for x in v for k in x))
        head = "".join(f"<th>{esc(fmt.label(c))}</th>" for c in cols)
        body = "".join("<tr>" + "".join(f"<td>{esc(fmt.value(c, x.get(c)))}</td>" for c in cols) + "</tr>"
                       for x in v[:10])
        more = f"<p class=note>(and {len(v) - 10} more in the JSON report)</p>" if len(v) > 10 else ""
        return f"<table class=nested><tr>{head}</tr>{body}</table>{more}"
    return esc(fmt.value(key, v))


def _evidence(f: dict) -> str:
    """Labelled values with units: one table, headed "evidence", a column per rank (or one value column)."""
    ev = f.get("evidence") or {}
    per_rank = ev.get("per_rank")
    ranks = per_rank[:MAX_EVIDENCE_RANKS] if isinstance(per_rank, list) and per_rank and all(
        isinstance(x, dict) for x in per_rank) else None
    skip = ("steps", "rank")
    if ranks:
        cols = [f"rank {x.get('rank', '?')}" for x in ranks]
        keys = [k for k in dict.fromkeys(k for x in ranks for k in x) if k not in skip]
        rows = [(k, [x.get(k) for x in ranks]) for k in keys]
        rest = [(k, v) for k, v in ev.items() if k not in skip + ("per_rank",) and v is not None]
    else:
        cols = ["value"]
        rows = [(k, [v]) for k, v in ev.items() if k not in skip and v is not None]
        rest = []
    if not rows and not rest:
        return ""
    head = "<th>evidence</th>" + "".join(f"<th>{esc(c)}</th>" for c in cols)
    body = "".join(f"<tr><td>{esc(fmt.label(k))}</td>" + "".join(f"<td>{_cell(k, v)}</td>" for v in vals) + "</tr>"
                   for k, vals in rows)
    body += "".join(f"<tr><td>{esc(fmt.label(k))}</td><td colspan={len(cols)}>{_cell(k, v)}</td></tr>" for k, v in rest)
    left = len(per_rank) - len(ranks) if ranks else 0
    more = f"<p class=note>(and {esc(fmt.count(left, 'more rank'))} in the JSON report)</p>" if left else ""
    return f"<div class=scroll><table class=evidence><tr>{head}</tr>{body}</table></div>{more}"


def _finding(f: dict) -> str:
    sev = f.get("severity", "info")
    meta = [esc(sections.finding_meta(f))] + [f"<em>{esc(n)}</em>" for n in sections.finding_notes(f)]
    if f.get("docs"):
        meta.append(f"details: <code>{esc(f['docs'])}</code>")
    return (
        f"<article class='finding {esc(sev)}' id='finding-{esc(f['id'])}' data-finding='{esc(f['id'])}'>"
        f"<h3><span class='badge {esc(sev)}'>{esc(sev)}</span> <code>{esc(f['id'])}</code>: {esc(f.get('title', ''))}</h3>"
        f"<p class=meta>{' · '.join(meta)}</p>"
        f"{_evidence(f)}"
        f"<div><strong>Fix</strong></div><pre class=fix><code>{esc(f.get('fix', ''))}</code></pre>"
        "</article>"
    )


def _summary(findings: list[dict]) -> str:
    """One line per finding, worst first, linking to its details."""
    if not findings:
        return "<section id=summary><h2>Summary</h2><p>No problems found.</p></section>"
    rows = []
    for f in findings:
        sev = f.get("severity", "info")
        at = f.get("time_at_stake_us")
        rows.append(f"<tr><td><span class='badge {esc(sev)}'>{esc(sev)}</span></td>"
                    f"<td><a href='#finding-{esc(f['id'])}'><code>{esc(f['id'])}</code></a></td>"
                    f"<td>{esc(f.get('title', ''))}</td>"
                    f"<td class=num>{esc(fmt.ms(at)) if at else '-'}</td></tr>")
    return ("<section id=summary><h2>Summary</h2><table class=summary><tr><th>severity</th><th>rule</th>"
            f"<th>finding</th><th class=num>at stake per step</th></tr>{''.join(rows)}</table></section>")


def _bar(s: dict, keys, colors) -> str:
    wall = s.get("wall_us") or 0
    if not wall:
        return ""
    parts = []
    for k in keys:
        v = (s.get("breakdown_us") or {}).get(k) or 0
        if v > 0:
            parts.append(f"<span style='width:{100 * v / wall:.3f}%;background:{colors(k)}' title='{esc(k)}'></span>")
    return f"<div class=bar>{''.join(parts)}</div>"


def _rank_table(r: dict, colors) -> str:
    keys = [k for k, _s, _l in breakdown(r["basis"])]
    n_bd = len(keys)
    head = sections.step_header(r)
    cells_h = [f"<th>{esc(h)}</th>" for h in head[:2]]
    cells_h += [f"<th><span class=swatch style='background:{colors(k)}'></span>{esc(h)}</th>"
                for k, h in zip(keys, head[2:2 + n_bd])]
    cells_h += [f"<th>{esc(h)}</th>" for h in head[2 + n_bd:]] + ["<th>split</th>"]
    rows = []
    for s in sections.shown_steps(r["steps"]):
        cells = "".join(f"<td>{esc(c)}</td>" for c in sections.step_cells(r, s))
        rows.append(f"<tr>{cells}<td>{_bar(s, keys, colors)}</td></tr>")
    note_html = "".join(f"<p class=note>{esc(note)}</p>" for note in sections.rank_notes(r))
    return (f"<h3 id='rank-{esc(r['rank'])}'>{esc(sections.rank_title(r))}</h3>"
            f"<div class=scroll><table class=steps><tr>{''.join(cells_h)}</tr>{''.join(rows)}</table></div>{note_html}")


def _waterfall(d: dict) -> str:
    w = waterfall.rows(d)
    if w is None:
        return ""
    step = w["step_us"] or 1.0

    def row(name: str, value: str, lo: float, hi: float, colour: str) -> str:
        return (f"<tr><td>{name}</td><td class=num>{esc(value)}</td><td><div class=wf><span style='left:"
                f"{100 * lo / step:.3f}%;width:{max(100 * (hi - lo) / step, 0.2):.3f}%;background:{colour}'></span>"
                "</div></td></tr>")

    body = row("measured step", fmt.ms(w["step_us"]), 0, w["step_us"], "#5F6368")
    for c in w["claims"]:
        after = f" after <code>{esc(c['after'])}</code>" if c.get("after") else ""
        body += row(f"<a href='#finding-{esc(c['id'])}'><code>{esc(c['id'])}</code></a>{after}", fmt.signed_ms(-c["us"]),
                    c["from_us"] - c["us"], c["from_us"], waterfall.SEVERITY_COLORS.get(c["severity"], "#0B57D0"))
    body += row("projected step", fmt.ms(w["projected_step_us"]), 0, w["projected_step_us"], "#137333")
    return (f"<section id=waterfall><h2>Where the step could go (rank {esc(w['rank'])})</h2>"
            f"<table class=waterfall><tr><th></th><th class=num>per step</th><th></th></tr>{body}</table></section>")


def _utilization(d: dict) -> str:
    items = [(r["rank"], sections.utilization(r)) for r in d.get("ranks") or []]
    items = [(rk, u) for rk, u in items if u]
    if not items:
        return ""
    lis = "".join(f"<li>rank {esc(rk)}: {esc(u)}</li>" for rk, u in items)
    return ("<section id=utilization><h2>nvidia-smi view</h2><p class=note>What GPU-Util would have shown "
            f"(docs/utilization.md).</p><ul>{lis}</ul></section>")


def _plots(d: dict) -> str:
    from .plots import figures, png_bytes

    figs = figures(d)
    parts = ["<section id=plots><h2>Plots</h2>"]
    if not figs:
        parts.append("<p class=note>No plots: the report has no steps.</p>")
    for name, fig in figs.items():
        data = base64.b64encode(png_bytes(fig)).decode("ascii")
        cap = _FIGURE_CAPTIONS.get(name, "")
        parts.append(f"<figure id='plot-{name}'><img alt='{esc(name.replace('_', ' '))} plot' "
                     f"src='data:image/png;base64,{data}'><figcaption>{esc(cap)}</figcaption></figure>")
    return "".join(parts) + "</section>"


def render_html(d: dict, rep=None) -> str:
    """The page; ``rep`` is accepted for callers written before the document carried everything, and not used."""
    n = d.get("ranks_analyzed", len(d.get("ranks", [])))
    world = d.get("world_size")
    findings = d.get("findings") or []
    top = findings[0]["severity"] if findings else "ok"
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        "<title>traceinspect report</title>",
        f"<style>{_CSS}</style></head><body><main>",
        "<header><h1>traceinspect report</h1>",
        f"<p class=src>Source: <code>{esc(d.get('source'))}</code> · {n} of {world or n} ranks analyzed"
        + (f" (world size {esc(world)})" if world else "") + "</p>",
        "".join(f"<p class=src>{esc(line.strip())}</p>" for line in sections.runs_lines(d)),
        f"<div class='verdict {esc(top)}' id=verdict>Verdict: {esc(sections.verdict(d))}</div>",
        "<nav><a href='#waterfall'>Waterfall</a><a href='#summary'>Summary</a><a href='#plots'>Plots</a>"
        "<a href='#findings'>Findings</a><a href='#ranks'>Ranks and steps</a><a href='#utilization'>nvidia-smi view</a>"
        "</nav></header>",
        _waterfall(d),
        _summary(findings),
        _plots(d),
        f"<section id=findings><h2>Findings ({len(findings)})</h2>",
    ]
    parts += [_finding(f) for f in findings] if findings else ["<p>No problems found.</p>"]
    parts.append("</section><section id=ranks><h2>Ranks and steps</h2>")
    if not d.get("ranks"):
        parts.append("<p class=note>No rank could be analyzed.</p>")
    for r in d.get("ranks", []):
        parts.append(_rank_table(r, _color))
    if sections.any_synthetic(d):
        parts.append(f"<p class=note>{esc(SYNTHETIC_NOTE)}</p>")
    if d.get("missing_ranks"):
        parts.append(f"<p id=missing-ranks><strong>Missing ranks</strong> (no usable trace file): "
                     f"{esc(fmt.ranges(d['missing_ranks']))}</p>")
    parts.append("</section>")
    parts.append(_utilization(d))
    if d.get("skipped"):
        items = "".join(f"<li><code>{esc(s['file'])}</code>: {esc(s['reason'])}</li>" for s in d["skipped"])
        parts.append(f"<section id=skipped><h2>Skipped files ({len(d['skipped'])})</h2><ul>{items}</ul></section>")
    if d.get("errors"):
        items = "".join(f"<li class=error>{esc(e)}</li>" for e in d["errors"])
        parts.append(f"<section id=errors><h2>Analysis errors</h2><ul>{items}</ul></section>")
    parts.append(f"<footer>traceinspect · report schema {esc(d.get('schema'))}</footer></main></body></html>\n")
    return "".join(parts)
