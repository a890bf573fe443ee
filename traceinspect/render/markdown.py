"""The Markdown report, from the JSON report dict."""

from __future__ import annotations

from .text import CPU_COLUMNS, GPU_COLUMNS, ranges_text, mb, ms, pct, verdict


def render_markdown(d: dict) -> str:
    out = ["# traceinspect report", "", f"Source: `{d['source']}`", ""]
    n = d.get("ranks_analyzed", len(d["ranks"]))
    world = d.get("world_size")
    out.append(f"{n} of {world or n} ranks analyzed." + (f" World size {world}." if world else ""))
    if (d.get("runs") or {}).get("notable"):
        out.append(f"Runs: {d['runs']['summary']}.")
    out += ["", f"**Verdict:** {verdict(d)}", ""]
    out.append("## Findings")
    out.append("")
    if not d["findings"]:
        out += ["No problems found.", ""]
    for f in d["findings"]:
        at = f.get("time_at_stake_us")
        out.append(f"### `{f['id']}` ({f['severity']}): {f['title']}")
        out.append("")
        out.append(
            f"Ranks {ranges_text(f['ranks'])}; steps {ranges_text(f['steps'])}"
            + (f"; at stake about {at / 1000:.2f} ms per step." if at else ".")
        )
        out.append("")
        ev = f.get("evidence") or {}
        per_rank = ev.get("per_rank")
        src = per_rank[0] if isinstance(per_rank, list) and per_rank else ev
        for k, v in src.items():
            if k == "steps" or v is None:
                continue
            if isinstance(v, float):
                v = f"{v:.4g}"
            out.append(f"- {k}: `{v}`")
        out += ["", "Fix:", "", "```python", f["fix"], "```", ""]
    for r in d["ranks"]:
        gpu = r["basis"] == "gpu"
        cols = GPU_COLUMNS if gpu else CPU_COLUMNS
        dev = r["device"] or ("CPU only" if not gpu else "GPU")
        out.append(f"## Rank {r['rank']} ({dev})")
        out.append("")
        head = ["step", "wall ms"] + [label for _, label in cols]
        if gpu:
            head += ["busy ms", "H2D MB", "pageable MB", "D2H MB"]
        head.append("loader ms")
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---:|" * len(head))
        for s in r["steps"]:
            wall = s["wall_us"]
            row = [str(s["step"]), ms(wall)] + [pct(s["breakdown_us"].get(k), wall) for k, _ in cols]
            if gpu:
                row += [ms(s["gpu_busy_us"]), mb(s["h2d_bytes"]), mb(s["pageable_h2d_bytes"]), mb(s["d2h_bytes"])]
            row.append(ms(s["dataloader_us"]))
            out.append("| " + " | ".join(row) + " |")
        out.append("")
    if d.get("missing_ranks"):
        out += [f"Missing ranks (no usable trace file): {', '.join(map(str, d['missing_ranks']))}", ""]
    if d["skipped"]:
        out += ["## Skipped", ""]
        out += [f"- `{s['file']}`: {s['reason']}" for s in d["skipped"]]
        out.append("")
    return "\n".join(out)
