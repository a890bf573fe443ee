"""The HTML report: one self-contained file (inline CSS, plots as base64 PNG; no script, no network, no CDN).

``render_html(d, rep)`` reads the numbers from the report dict ``d`` (``report.to_dict()``) and the per-event tables
for the plots from ``rep`` (the ``Report``; may be None, e.g. for a saved report.json: the plots that need per-event
tables are then left out). Renderers format; they do not compute.
"""

from __future__ import annotations

import base64
import html
import json
import math

from .text import CPU_COLUMNS, GPU_COLUMNS, ranges_text, mb, ms, pct, verdict

MAX_EVIDENCE_RANKS = 8  # per-rank evidence columns shown; the rest are in the JSON report

_CSS = """
:root { --fg: #1d1d1f; --muted: #5f6368; --line: #dadce0; --bg: #ffffff; --panel: #f6f8fa;
        --critical: #b00020; --warning: #b26a00; --info: #0b57d0; --ok: #137333; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 -apple-system, "Segoe UI", Roboto, "DejaVu Sans", Arial, sans-serif;
       color: var(--fg); background: var(--bg); }
main { max-width: 1280px; margin: 0 auto; padding: 24px 28px 48px; }
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
.scroll { overflow-x: auto; max-width: 100%; }
table.summary td, table.summary th { text-align: left; } table.summary td.num, table.summary th.num { text-align: right; }
table.summary td:nth-child(-n+2), table.summary td.num { white-space: nowrap; }
table.summary a { color: var(--fg); }
.unit { color: var(--muted); font-size: 12px; }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 4px; vertical-align: 0; }
.bar { display: flex; width: 220px; height: 12px; border-radius: 2px; overflow: hidden; background: #eee; }
.bar span { display: block; height: 100%; }
figure { margin: 0 0 22px; } figure img { max-width: 100%; height: auto; border: 1px solid var(--line); }
figcaption { color: var(--muted); font-size: 13px; margin-top: 4px; }
.note { color: var(--muted); }
.error { color: var(--critical); }
footer { margin-top: 40px; color: var(--muted); font-size: 12px; }
"""

_FIGURE_CAPTIONS = {
    "step_breakdown": "Where each step's time goes, per rank and step: the stack adds up to the step's wall time.",
    "timeline": "One step's GPU activity per stream (the median-wall step): gaps are idle GPU; pageable copies are "
                "hatched and marked with a triangle.",
    "message_sizes": "Size of every collective call against the DDP bucket cap: many calls far below the cap are "
                     "latency-bound; one call per bucket is the goal.",
    "ranks": "Ranks side by side: the straggler is the rank the others wait for (less waiting, more of the cause).",
}


def esc(x) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def _num(v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return "-"
        if v == int(v) and abs(v) < 1e15:
            return f"{int(v):,}"
        return f"{v:,.0f}" if abs(v) >= 1e3 else f"{v:.4g}"
    return str(v)


def _hint(key: str, v) -> str:
    """A unit hint beside a raw number, from the key's suffix (us -> ms, bytes -> MB, share -> %)."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return ""
    k = key.lower()
    if (k.endswith("_us") or "_us_" in k) and abs(v) >= 1000:
        return f" <span class=unit>({v / 1000:.2f} ms)</span>"
    if k.endswith("_bytes") or "_bytes_" in k:
        return f" <span class=unit>({v / 1e6:.1f} MB)</span>"
    if "share" in k and 0 <= v <= 1.5:
        return f" <span class=unit>({100 * v:.1f} %)</span>"
    return ""


def _value(key: str, v, depth: int = 0) -> str:
    """One evidence value as HTML: numbers with a unit hint, dicts and lists of dicts as nested tables."""
    if v is None:
        return "<span class=note>-</span>"
    if isinstance(v, dict) and depth < 2:
        rows = "".join(f"<tr><td>{esc(k)}</td><td>{_value(k, x, depth + 1)}</td></tr>" for k, x in v.items())
        return f"<table class='nested kv'>{rows}</table>"
    if isinstance(v, list) and v and all(isinstance(x, dict) for x in v) and depth < 2:
        cols = list(dict.fromkeys(k for x in v for k in x))
        head = "".join(f"<th>{esc(c)}</th>" for c in cols)
        body = "".join("<tr>" + "".join(f"<td>{_value(c, x.get(c), depth + 1)}</td>" for c in cols) + "</tr>"
                       for x in v)
        return f"<table class=nested><tr>{head}</tr>{body}</table>"
    if isinstance(v, (list, dict)):
        text = json.dumps(v)
        return f"<code>{esc(text if len(text) <= 400 else text[:397] + '...')}</code>"
    if isinstance(v, (int, float)):
        return esc(_num(v)) + _hint(key, v)
    return esc(v)


def _evidence(ev: dict) -> str:
    out = []
    per_rank = ev.get("per_rank")
    if isinstance(per_rank, list) and per_rank and all(isinstance(x, dict) for x in per_rank):
        shown = per_rank[:MAX_EVIDENCE_RANKS]
        keys = [k for k in dict.fromkeys(k for x in shown for k in x) if k != "rank"]
        head = "<th>evidence</th>" + "".join(f"<th>rank {esc(x.get('rank', '?'))}</th>" for x in shown)
        rows = []
        for k in keys:
            cells = "".join(f"<td>{_steps_cell(x.get(k)) if k == 'steps' else _value(k, x.get(k))}</td>" for x in shown)
            rows.append(f"<tr><td>{esc(k)}</td>{cells}</tr>")
        out.append(f"<div class=scroll><table class=evidence><tr>{head}</tr>{''.join(rows)}</table></div>")
        if len(per_rank) > len(shown):
            out.append(f"<p class=note>(and {len(per_rank) - len(shown)} more ranks in the JSON report)</p>")
    rest = {k: v for k, v in ev.items() if k != "per_rank" or not isinstance(per_rank, list)}
    if rest:
        rows = "".join(f"<tr><td>{esc(k)}</td><td>{_steps_cell(v) if k == 'steps' else _value(k, v)}</td></tr>"
                       for k, v in rest.items())
        what = "rule thresholds" if all(k.startswith("threshold") for k in rest) else "evidence"
        out.append(f"<div class=scroll><table class='evidence kv'><tr><th>{what}</th><th>value</th></tr>{rows}</table></div>")
    return "".join(out)


def _steps_cell(v) -> str:
    if isinstance(v, list) and all(isinstance(x, int) for x in v):
        return esc(ranges_text(v)) if v else "-"
    return _value("steps", v)


def _finding(f: dict) -> str:
    sev = f.get("severity", "info")
    at = f.get("time_at_stake_us")
    meta = [f"ranks {esc(ranges_text(f['ranks']) if f.get('ranks') else '-')}",
            f"steps {esc(ranges_text(f['steps']) if f.get('steps') else '-')}"]
    if at:
        meta.append(f"at stake about {at / 1000:.2f} ms per step")
    if f.get("docs"):
        meta.append(f"details: <code>{esc(f['docs'])}</code>")
    return (
        f"<article class='finding {esc(sev)}' id='finding-{esc(f['id'])}' data-finding='{esc(f['id'])}'>"
        f"<h3><span class='badge {esc(sev)}'>{esc(sev)}</span> <code>{esc(f['id'])}</code>: {esc(f.get('title', ''))}</h3>"
        f"<p class=meta>{' · '.join(meta)}</p>"
        f"{_evidence(f.get('evidence') or {})}"
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
                    f"<td class=num>{f'{at / 1000:.2f} ms' if at else '-'}</td></tr>")
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
    gpu = r["basis"] == "gpu"
    cols = GPU_COLUMNS if gpu else CPU_COLUMNS
    keys = [k for k, _ in cols]
    head = ["<th>step</th>", "<th>wall ms</th>"]
    head += [f"<th><span class=swatch style='background:{colors(k)}'></span>{esc(lab)}</th>" for k, lab in cols]
    if gpu:
        head += [f"<th>{h}</th>" for h in ("busy ms", "H2D MB", "pageable MB", "D2H MB")]
    head += ["<th>loader ms</th>", "<th>split</th>"]
    rows = []
    for s in r["steps"]:
        wall = s["wall_us"]
        cells = [esc(str(s["step"]) + ("*" if s.get("synthetic") else "")), ms(wall)]
        cells += [pct((s.get("breakdown_us") or {}).get(k), wall) for k in keys]
        if gpu:
            cells += [ms(s.get("gpu_busy_us")), mb(s.get("h2d_bytes")), mb(s.get("pageable_h2d_bytes")),
                      mb(s.get("d2h_bytes"))]
        cells.append(ms(s.get("dataloader_us")))
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + f"<td>{_bar(s, keys, colors)}</td></tr>")
    dev = r.get("device") or ("CPU only" if not gpu else "GPU")
    basis = "GPU timeline, % of step" if gpu else "training thread, % of step"
    sm = r.get("summary") or {}
    mean = f" · mean step {ms(sm.get('mean_wall_us'))} ms" if sm.get("mean_wall_us") is not None else ""
    return (f"<h3 id='rank-{esc(r['rank'])}'>Rank {esc(r['rank'])} · {esc(dev)} · {len(r['steps'])} steps · "
            f"{basis}{mean}</h3><table class=steps><tr>{''.join(head)}</tr>{''.join(rows)}</table>")


def render_html(d: dict, rep=None) -> str:
    from .plots import color, figures, png_bytes

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
        f"<div class='verdict {esc(top)}' id=verdict>Verdict: {esc(verdict(d))}</div>",
        "<nav><a href='#summary'>Summary</a><a href='#plots'>Plots</a><a href='#findings'>Findings</a>"
        "<a href='#ranks'>Ranks and steps</a></nav>",
        "</header>",
        _summary(findings),
    ]

    figs = figures(d, rep)
    parts.append("<section id=plots><h2>Plots</h2>")
    if not figs:
        parts.append("<p class=note>No plots: the report has no steps.</p>")
    for name, fig in figs.items():
        data = base64.b64encode(png_bytes(fig)).decode("ascii")
        cap = _FIGURE_CAPTIONS.get(name, "")
        parts.append(f"<figure id='plot-{name}'><img alt='{esc(name.replace('_', ' '))} plot' "
                     f"src='data:image/png;base64,{data}'><figcaption>{esc(cap)}</figcaption></figure>")
    parts.append("</section>")

    parts.append(f"<section id=findings><h2>Findings ({len(findings)})</h2>")
    if findings:
        parts += [_finding(f) for f in findings]
    else:
        parts.append("<p>No problems found.</p>")
    parts.append("</section>")

    parts.append("<section id=ranks><h2>Ranks and steps</h2>")
    if not d.get("ranks"):
        parts.append("<p class=note>No rank could be analyzed.</p>")
    for r in d.get("ranks", []):
        parts.append(_rank_table(r, color))
    if any(s.get("synthetic") for r in d.get("ranks", []) for s in r["steps"]):
        parts.append("<p class=note>* a whole trace window without ProfilerStep annotations, taken as one step.</p>")
    if d.get("missing_ranks"):
        parts.append(f"<p id=missing-ranks><strong>Missing ranks</strong> (no usable trace file): "
                     f"{esc(ranges_text(d['missing_ranks']))}</p>")
    parts.append("</section>")
    if d.get("skipped"):
        items = "".join(f"<li><code>{esc(s['file'])}</code>: {esc(s['reason'])}</li>" for s in d["skipped"])
        parts.append(f"<section id=skipped><h2>Skipped files ({len(d['skipped'])})</h2><ul>{items}</ul></section>")
    if d.get("errors"):
        items = "".join(f"<li class=error>{esc(e)}</li>" for e in d["errors"])
        parts.append(f"<section id=errors><h2>Analysis errors</h2><ul>{items}</ul></section>")
    parts.append(f"<footer>traceinspect · report schema {esc(d.get('schema'))}</footer></main></body></html>\n")
    return "".join(parts)
