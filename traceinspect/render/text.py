"""The terminal report, from the JSON report dict (so a saved report.json renders the same way).

Renderers format; they do not compute: every number comes from the report dict.
"""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table
from rich.text import Text

SEV_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}

GPU_COLUMNS = (
    ("compute", "comp%"),
    ("comm_exposed", "comm%"),
    ("h2d_exposed", "h2d%"),
    ("d2h_exposed", "d2h%"),
    ("d2d_exposed", "d2d%"),
    ("memset_exposed", "mset%"),
    ("idle", "idle%"),
)
CPU_COLUMNS = (
    ("dataloader", "load%"),
    ("forward", "fwd%"),
    ("backward", "bwd%"),
    ("comm", "comm%"),
    ("optimizer", "optim%"),
    ("other", "other%"),
)

# Display names of breakdown categories, shared by every renderer.
LABELS = {
    "compute": "compute",
    "comm_exposed": "exposed comm",
    "h2d_exposed": "exposed H2D",
    "d2h_exposed": "exposed D2H",
    "d2d_exposed": "exposed D2D",
    "memset_exposed": "memset",
    "idle": "idle",
    "dataloader": "dataloader",
    "forward": "forward",
    "backward": "backward",
    "comm": "comm",
    "optimizer": "optimizer",
    "other": "other",
}


def ms(us) -> str:
    return "-" if us is None else f"{us / 1000:.2f}"


def mb(b) -> str:
    return "-" if b is None else f"{b / 1e6:.1f}"


def pct(part, whole) -> str:
    if part is None or not whole:
        return "-"
    return f"{100 * part / whole:.0f}%"


def verdict(d: dict) -> str:
    """One line: the slowest rank's step, the step if every finding were fixed, the largest claims first."""
    v = d.get("verdict")
    if v and v.get("text"):
        line = f"rank {v['rank']}: {v['text']}"
        counts = [(sev, sum(1 for f in d["findings"] if f["severity"] == sev)) for sev in ("critical", "warning")]
        counts = [f"{n} {sev}" + ("s" if sev == "warning" and n > 1 else "") for sev, n in counts if n]
        return line + (f" · {', '.join(counts)}" if counts else " · no warning or critical finding")
    return _breakdown_verdict(d)


def _breakdown_verdict(d: dict) -> str:
    """A report without the accounting (saved by an older version): the slowest rank's split of the step."""
    ranks = [r for r in d["ranks"] if r["summary"].get("steps")]
    if not ranks:
        return "no steps found"
    r = max(ranks, key=lambda x: x["summary"]["mean_wall_us"] or 0)
    s = r["summary"]
    wall = s["mean_wall_us"] or 0
    parts = sorted(s["mean_breakdown_us"].items(), key=lambda kv: -(kv[1] or 0))
    shares = ", ".join(f"{pct(v, wall)} {LABELS.get(k, k)}" for k, v in parts if v and v / max(wall, 1e-9) >= 0.01)
    line = f"step {wall / 1000:.1f} ms on rank {r['rank']}: {shares}"
    if d["findings"]:
        f = d["findings"][0]
        more = len(d["findings"]) - 1
        line += f" · {f['severity']}: {f['id']}" + (f" (+{more} more)" if more else "")
    else:
        line += " · no problems found"
    return line


MAX_STEP_ROWS = 12


def shown_steps(steps: list[dict]) -> list[dict]:
    """Long runs show their slowest steps (in step order); the JSON report has them all."""
    if len(steps) <= MAX_STEP_ROWS:
        return steps
    slowest = sorted(steps, key=lambda s: -(s["wall_us"] or 0))[:MAX_STEP_ROWS]
    return sorted(slowest, key=lambda s: s["step"])


def _step_table(r: dict) -> Table:
    gpu = r["basis"] == "gpu"
    cols = GPU_COLUMNS if gpu else CPU_COLUMNS
    t = Table(title=None, show_edge=False, pad_edge=False, box=None, header_style="bold")
    t.add_column("step", justify="right")
    t.add_column("wall ms", justify="right")
    for _, label in cols:
        t.add_column(label, justify="right")
    if gpu:
        for label in ("busy ms", "H2D MB", "pgbl MB", "D2H MB"):
            t.add_column(label, justify="right")
    t.add_column("load ms", justify="right")
    if any("allreduce_count" in s for s in r["steps"]):
        t.add_column("AR n/MB", justify="right")
    for s in shown_steps(r["steps"]):
        wall = s["wall_us"]
        row = [str(s["step"]) + ("*" if s.get("synthetic") else ""), ms(wall)]
        row += [pct(s["breakdown_us"].get(k), wall) for k, _ in cols]
        if gpu:
            row += [ms(s["gpu_busy_us"]), mb(s["h2d_bytes"]), mb(s["pageable_h2d_bytes"]), mb(s["d2h_bytes"])]
        row.append(ms(s["dataloader_us"]))
        if "allreduce_count" in s:
            row.append(f"{s['allreduce_count']}/{mb(s.get('allreduce_bytes'))}")
        t.add_row(*row)
    return t


def _evidence_lines(ev: dict, limit: int = 8) -> list[str]:
    """Flatten the first rank's evidence into short key: value lines (rules list the rank their title names
    first)."""
    lines = []
    per_rank = ev.get("per_rank")
    src = per_rank[0] if isinstance(per_rank, list) and per_rank else ev
    for k, v in src.items():
        if k in ("steps",) or v is None:
            continue
        if isinstance(v, float):
            v = f"{v:.3g}" if abs(v) < 1e4 else f"{v:,.0f}"
        elif isinstance(v, (list, dict)):
            v = str(v)
            v = v if len(v) <= 90 else v[:87] + "..."
        lines.append(f"{k}: {v}")
        if len(lines) >= limit:
            break
    if isinstance(per_rank, list) and len(per_rank) > 1:
        lines.append(f"(and {len(per_rank) - 1} more rank(s) in the JSON report)")
    return lines


def ranges_text(xs: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    out, start, prev = [], None, None
    for x in sorted(xs) + [None]:
        if start is None:
            start = prev = x
        elif x is not None and x == prev + 1:
            prev = x
        else:
            out.append(f"{start}-{prev}" if prev != start else f"{start}")
            start = prev = x
    return ", ".join(out)


MAX_RUN_ROWS = 6


def _other_runs(runs: dict, console: Console) -> None:
    """One line per other run of the folder (the most recent ones): its number, folders, ranks, start."""
    others = [r for r in runs["runs"] if not r["selected"]]
    for r in others[-MAX_RUN_ROWS:]:
        folders = ", ".join(r["folders"][:2]) + (" ..." if len(r["folders"]) > 2 else "")
        ranks = ranges_text(r["ranks"])
        console.print(f"  run {r['run']}: {folders} · rank{'s' if len(r['ranks']) > 1 else ''} {ranks} · "
                      f"{r['files']} file{'s' if r['files'] > 1 else ''}" + (f" · {r['start']}" if r["start"] else ""))
    if len(others) > MAX_RUN_ROWS:
        console.print(f"  ({len(others) - MAX_RUN_ROWS} older runs in the JSON report)")


def render(d: dict, console: Console) -> None:
    n = d.get("ranks_analyzed", len(d["ranks"]))
    world = d.get("world_size")
    total = world or n
    console.print(Text(f"traceinspect report: {d['source']}", style="bold"))
    console.print(f"{n} of {total} ranks analyzed" + (f" (world size {world})" if world else ""))
    if (d.get("runs") or {}).get("notable"):
        console.print(d["runs"]["summary"])  # several runs, windows or copies in the folder (docs/folders.md)
        _other_runs(d["runs"], console)
    console.print(Text("Verdict: " + verdict(d), style="bold"))
    for r in d["ranks"]:
        console.print()
        dev = r["device"] or ("CPU only" if r["basis"] == "cpu" else "GPU")
        basis = "GPU timeline, exposed % of step" if r["basis"] == "gpu" else "training thread, % of step"
        console.print(Text(f"Rank {r['rank']} · {dev} · {len(r['steps'])} steps · {basis}", style="bold"))
        console.print(_step_table(r))
        if len(r["steps"]) > MAX_STEP_ROWS:
            s = r["summary"]
            console.print(Text(f"{len(r['steps'])} steps, the {MAX_STEP_ROWS} slowest shown (all in --json); step wall "
                               f"mean {ms(s['mean_wall_us'])} ms, min {ms(s['min_wall_us'])}, max {ms(s['max_wall_us'])}",
                               style="dim"))
        util = (r.get("utilization") or {}).get("summary")
        if util and util.get("text"):
            console.print(Text(util["text"], style="dim"))
        backlog = [s for s in r["steps"] if s.get("backlog_us")]
        if backlog:
            console.print(Text("GPU backlog from before the window (not counted in the step): " + ", ".join(
                f"step {s['step']} {ms(s['backlog_us'])} ms" for s in backlog), style="dim"))
    console.print()
    if d["findings"]:
        console.print(Text(f"Findings ({len(d['findings'])})", style="bold"))
        for f in d["findings"]:
            head = Text()
            head.append(f"[{f['severity']}] ", style=SEV_STYLE.get(f["severity"], ""))
            head.append(f"{f['id']}: ", style="bold")
            head.append(f["title"])
            console.print(head)
            at = f.get("time_at_stake_us")
            share = f.get("share_of_step")
            console.print(
                f"  ranks {ranges_text(f['ranks'])} · steps {ranges_text(f['steps'])}"
                + ((f" · at stake ~{at / 1000:.2f} ms/step" if at >= 10 else f" · at stake ~{at:.1f} us/step")
                   if at else "")
                + (f" ({100 * share:.0f} % of the step)" if at and share is not None else "")
            )
            if f.get("severity_reason"):
                console.print(Text(f"  {f['severity']}: {f['severity_reason']}", style="dim"))
            if f.get("explained_by"):
                why = ", ".join(f"{e['id']} {e['us'] / 1000:.2f} ms" for e in f["explained_by"])
                console.print(Text(f"  idle explained by: {why} (claimed there, not here)", style="dim"))
            for line in _evidence_lines(f.get("evidence") or {}):
                console.print(Text("  " + line, style="dim"))
            console.print("  fix:")
            for line in f["fix"].splitlines():
                console.print(Text("    " + line, style="green"))
    else:
        console.print(Text("No problems found.", style="bold green"))
    if d.get("missing_ranks"):
        console.print()
        console.print(Text(f"Missing ranks (no usable trace file): {ranges_text(d['missing_ranks'])}", style="bold"))
    if d.get("errors"):
        for e in d["errors"]:
            console.print(Text(f"analysis error: {e}", style="red"))
    if d["skipped"]:
        console.print()
        console.print(Text(f"Skipped ({len(d['skipped'])})", style="bold"))
        for s in d["skipped"]:
            console.print(f"  {s['file']}: {s['reason']}")


def render_text(d: dict, width: int = 120, color: bool = False) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=color, color_system="standard" if color else None,
                      highlight=False, soft_wrap=False)
    render(d, console)
    return buf.getvalue()
