"""The report's sections as plain strings, shared by the terminal, Markdown, HTML and TensorBoard renderers.

Each renderer lays these out in its own markup; the words and numbers come from here, so every page shows the same
sections (``vocabulary.SECTIONS``) with the same numbers written the same way (``format``). Every string read
from a trace (names, titles, paths, messages, fixes) comes out of here plain and bounded (``safe``): each renderer
then escapes its own markup.
"""

from __future__ import annotations

from ..report.doc import FindingDoc, RankDoc, ReportDoc, StepDoc, evidence_rank
from . import format as fmt, safe
from .document import given, present, report_doc
from .vocabulary import STEP_EXTRA, STEP_EXTRA_GPU, SYNTHETIC_NOTE, breakdown, label

MAX_STEP_ROWS = 12

_FILL_WORDS = {"copy": "copies (no kernel running)", "dataloader": "waiting for data",
               "sync": "the CPU blocked in syncs", "other": "launch gaps (the CPU not issuing kernels)"}


def verdict(d: ReportDoc | dict) -> str:
    """One line: the slowest rank's step, the step if every finding were fixed, the largest claims first (the
    document's ``verdict``); a report without it (an older version's) gets the slowest rank's split of the step.
    Also takes the report's JSON object (a notebook's ``result.to_dict()``)."""
    d = report_doc(d)
    v = given(d.verdict)
    if v is not None and given(v.text):
        counts = [(sev, sum(1 for f in d.findings if f.severity == sev)) for sev in ("critical", "warning")]
        counts = [f"{n} critical" if sev == "critical" else fmt.count(n, sev) for sev, n in counts if n]
        return _strategy(d) + f"rank {v.rank}: {v.text}" + (f" · {', '.join(counts)}" if counts else
                                                            " · no warning or critical finding")
    return _strategy(d) + breakdown_verdict(d)


def _strategy(d: ReportDoc) -> str:
    """The parallel strategy the document names (``strategy.parallelism``), as the verdict's first words."""
    strategy = given(d.strategy)
    s = strategy.parallelism if strategy is not None else None
    return f"{safe.words(s)} · " if s else ""


def communication(d: ReportDoc) -> str | None:
    """The document's note on its communication (``strategy.communication``: a parallel run without a collective
    recorded), or None."""
    strategy = given(d.strategy)
    note = given(strategy.communication) if strategy is not None else None
    return safe.words(note) if note else None


def breakdown_verdict(d: ReportDoc) -> str:
    """The slowest rank's mean step and where it went, plus the worst findings."""
    ranks = [r for r in d.ranks if r.summary.steps]
    if not ranks:
        return "no steps found"
    r = max(ranks, key=lambda x: x.summary.mean_wall_us or 0)
    s = r.summary
    wall = s.mean_wall_us or 0
    parts = sorted((given(s.mean_breakdown_us) or {}).items(), key=lambda kv: -(kv[1] or 0))
    shares = ", ".join(f"{fmt.pct_num(v / wall)} % {label(k)}" for k, v in parts if wall and v and v / wall >= 0.01)
    line = f"step {fmt.ms(wall, 1)} on rank {r.rank}: {shares}"
    if d.findings:
        f = d.findings[0]
        more = len(d.findings) - 1
        line += f" · {f.severity}: {f.id}" + (f" (+{more} more)" if more else "")
    else:
        line += " · no problems found"
    return line


def shown_steps(steps: list[StepDoc]) -> list[StepDoc]:
    """Long runs show their slowest steps (in step order); the JSON report has them all."""
    if len(steps) <= MAX_STEP_ROWS:
        return steps
    slowest = sorted(steps, key=lambda s: -(s.wall_us or 0))[:MAX_STEP_ROWS]
    return sorted(slowest, key=lambda s: s.step)


def has_allreduce(r: RankDoc) -> bool:
    return any(present(s.allreduce_count) for s in r.steps)


def step_header(r: RankDoc) -> list[str]:
    """Column headers of a rank's step table: step, wall, the breakdown (% of the step), then the extras."""
    head = ["step", "wall ms"] + [f"{short} %" for _k, short, _l in breakdown(r.basis)]
    if r.basis == "gpu":
        head += [h for _k, h, _u in STEP_EXTRA_GPU]
    head += [h for _k, h, _u in STEP_EXTRA]
    if has_allreduce(r):
        head += ["AR n", "AR MB"]
    return head


def step_cells(r: RankDoc, s: StepDoc) -> list[str]:
    wall, bd = s.wall_us, s.breakdown_us
    cells = [step_name(s), fmt.ms_num(wall)]
    cells += [fmt.pct_num(fmt.share(bd.get(k), wall)) for k, _s, _l in breakdown(r.basis)]
    extras = (STEP_EXTRA_GPU if r.basis == "gpu" else ()) + STEP_EXTRA
    cells += [fmt.ms_num(given(getattr(s, k))) if u == "ms" else fmt.mb_num(given(getattr(s, k)))
              for k, _h, u in extras]
    if has_allreduce(r):
        cells += [fmt.number(given(s.allreduce_count)), fmt.mb_num(given(s.allreduce_bytes))]
    return cells


def step_name(s: StepDoc) -> str:
    return str(s.step) + ("*" if s.synthetic else "")


def any_synthetic(d: ReportDoc) -> bool:
    return any(s.synthetic for r in d.ranks for s in r.steps)


def title(f: FindingDoc) -> str:
    """A finding's title (it may name ops and kernels): visible, each name and the whole bounded (``safe.words``)."""
    return safe.words(f.title)


def fix_lines(f: FindingDoc) -> list[str]:
    """A finding's fix, line by line, each visible and bounded, its names whole (``safe.lines``)."""
    return safe.lines(f.fix or "", code=True)


def source(d: ReportDoc) -> str:
    return safe.path(d.source)


def errors(d: ReportDoc) -> list[str]:
    return [safe.path(e) for e in d.errors]


def rank_title(r: RankDoc) -> str:
    dev = safe.name(r.device) if r.device else ("CPU only" if r.basis == "cpu" else "GPU")
    basis = "GPU timeline, exposed % of step" if r.basis == "gpu" else "training thread, % of step"
    return f"Rank {r.rank} · {dev} · {fmt.count(len(r.steps), 'step')} · {basis}"


def steps_note(r: RankDoc) -> str | None:
    """Said under a table that shows only the slowest steps."""
    if len(r.steps) <= MAX_STEP_ROWS:
        return None
    s = r.summary
    return (f"{len(r.steps)} steps, the {MAX_STEP_ROWS} slowest shown (all in the JSON report); step wall mean "
            f"{fmt.ms(given(s.mean_wall_us))}, min {fmt.ms(given(s.min_wall_us))}, "
            f"max {fmt.ms(given(s.max_wall_us))}")


def rank_notes(r: RankDoc) -> list[str]:
    """Said under a rank's step table: slowest steps only, GPU backlog left out, steps cut short (docs/metrics.md)."""
    out = [n for n in [steps_note(r)] if n]
    backlog = [s for s in r.steps if given(s.backlog_us)]
    if backlog:
        out.append("GPU backlog from before the window (not counted in the step): "
                   + ", ".join(f"step {s.step} {fmt.ms(s.backlog_us)}" for s in backlog))
    for p in given(r.partial_steps) or []:
        out.append(f"step {p.step} ({fmt.ms(p.cpu_us)}) was cut short at the end of the recording: "
                   "seen, not counted as a step")
    line = unmodelled_line(r)
    if line:
        out.append(line)
    return out


def unmodelled_line(r: RankDoc) -> str | None:
    """The events of categories no analysis models (docs/metrics.md), named with their counts, or None."""
    counts = given(r.unmodelled) or {}
    bad = given(r.impossible_time_events)
    lines = []
    if counts:
        named = ", ".join(f"{safe.name(c)} {fmt.count(n, 'event')}" for c, n in counts.items())
        lines.append(f"not modelled, so in no number above: {named}")
    if bad:
        files = ", ".join(safe.path(x) for x in r.files[:2])
        lines.append(f"skipped, {fmt.count(bad, 'event')} whose time is NaN, infinite or negative"
                     + (f" (in {files})" if files else ""))
    return "; ".join(lines) or None


MAX_RUN_ROWS = 6


def runs_lines(d: ReportDoc) -> list[str]:
    """What the folder held (docs/folders.md): said when it held several runs, windows or copies."""
    runs = given(d.runs)
    if runs is None or not runs.notable:
        return []
    out = [safe.path(runs.summary)]
    others = [r for r in runs.runs if not r.selected]
    for r in others[-MAX_RUN_ROWS:]:
        folders = ", ".join(safe.path(x) for x in r.folders[:2]) + (" ..." if len(r.folders) > 2 else "")
        ranks = f"rank{'s' if len(r.ranks) > 1 else ''} {fmt.ranges(r.ranks)}"
        out.append(f"  run {r.run}: {folders} · {ranks} · {fmt.count(r.files, 'file')}"
                   + (f" · {r.start}" if r.start else ""))
    if len(others) > MAX_RUN_ROWS:
        out.append(f"  ({len(others) - MAX_RUN_ROWS} older runs in the JSON report)")
    return out


def footnotes(d: ReportDoc) -> list[str]:
    return [SYNTHETIC_NOTE] if any_synthetic(d) else []


def utilization(r: RankDoc) -> str | None:
    """The nvidia-smi view of one rank (docs/utilization.md), or None when the rank has none."""
    s = r.utilization.summary
    if s is None or given(s.mean_util) is None:
        return None
    line = (f"{fmt.ms(given(s.window_us), 0)} samples, {fmt.count(given(s.windows), 'window')}: GPU-Util mean "
            f"{fmt.pct(s.mean_util, 0)}, min {fmt.pct(given(s.min_util), 0)}, max {fmt.pct(given(s.max_util), 0)}; "
            f"{fmt.pct(given(s.share_below_50), 0)} of samples below 50 %")
    filler = given(s.low_filler)
    fill = {"copy": s.low_fill_copy, "dataloader": s.low_fill_dataloader, "sync": s.low_fill_sync,
            "other": s.low_fill_other}
    if filler in _FILL_WORDS and given(fill[filler]) is not None:
        line += f", their non-kernel time mostly {_FILL_WORDS[filler]} ({fmt.pct(fill[filler], 0)})"
    comm_only = given(s.mean_comm_only)
    if (comm_only or 0) >= 0.05:
        line += f"; {fmt.pct(comm_only, 0)} of the time only NCCL kernels ran (counted busy by NVML)"
    return line


def finding_meta(f: FindingDoc) -> str:
    return f"ranks {fmt.ranges(f.ranks)} · steps {fmt.ranges(f.steps)}" + stake(f)


def _us(v) -> float:
    return float(v) if isinstance(v, (int, float)) and v == v else 0.0


def stake(f: FindingDoc) -> str:
    """The time at stake, in one place with what it is not: the claim now (the waterfall's bar), the saving that
    waits for the DataLoader's fix (its bar ``after``), and what of the rule's own estimate is not claimed here
    (the DataLoader's pace caps it, other findings claim or explain it): each named."""
    at, share, est = _us(f.time_at_stake_us), given(f.share_of_step), _us(given(f.estimate_us))
    af, lb = given(f.after_loader_fix), given(f.loader_bound)
    after = _us(af.us) if af is not None else 0.0
    cut = _us(lb.cut_us) if lb is not None else 0.0
    ex = [e for e in given(f.explained_by) or [] if _us(e.us) > 0]
    explained = sum(_us(e.us) for e in ex)
    if not (at or after or est):
        return ""
    of = "the step"
    per_rank = f.per_rank_evidence()
    named = evidence_rank(per_rank[0]) if per_rank else None  # the rank the evidence (and the title) names first
    rank = given(f.claim_rank)
    if named not in (None, rank) and rank is not None and share:
        # the title and the evidence describe another rank's step: name the one the claim is a share of
        of = f"rank {rank}'s {fmt.ms(at / share)} step"
    out = f" · at stake about {fmt.ms(at)} per step" + (f" ({fmt.pct(share, 0)} of {of})"
                                                       if at and share is not None else "")
    if after:
        out += (f" now, {fmt.ms(after)} more once the DataLoader keeps up (after {af.id}): "
                f"{fmt.ms(at + after)} in all")
    parts = []
    if cut >= 1.0:
        parts.append(f"{fmt.ms(cut)} not counted (the DataLoader's pace caps it)")
    if explained >= 1.0:
        parts.append(f"{fmt.ms(explained)} claimed by {', '.join(str(e.id) for e in ex)}")
    rest = est - at - after - cut - explained
    if rest >= max(0.05 * est, 5.0):
        parts.append(f"{fmt.ms(rest)} claimed by other findings or beyond what its fix removes")
    if parts:
        out += f"; of the {fmt.ms(est)} it measures: " + ", ".join(parts)
    return out


def finding_notes(f: FindingDoc) -> list[str]:
    """Why the finding has its severity, the idle time another finding explains instead, and where the claim is
    an upper bound (its evidence's ``claim_note``)."""
    out = []
    reason = given(f.severity_reason)
    if reason:
        out.append(f"{f.severity}: {safe.words(reason, safe.VALUE_WIDTH)}")
    explained_by = given(f.explained_by)
    if explained_by:
        why = ", ".join(f"{e.id} {fmt.ms(e.us)}" for e in explained_by)
        out.append(f"idle explained by: {why} (explained there, not claimed here)")
    note = f.claim_note()
    if note:
        out.append(f"claim: {safe.words(note, safe.VALUE_WIDTH)}")
    af = given(f.after_loader_fix)
    if af is not None and af.us:
        out.append(f"another {fmt.ms(af.us)} per step once the DataLoader keeps up ({af.id}): in steps "
                   f"{fmt.ranges(af.steps)} the GPU waited for the batch, so a faster GPU alone would only "
                   f"wait longer")
    lb = given(f.loader_bound)
    if lb is not None and given(lb.estimated):
        out.append(f"not counted: {fmt.ms(lb.cut_us)} more a step would need the DataLoader's pinning thread, "
                   f"which no trace shows, to move the step's {fmt.mb(given(lb.pinned_bytes_per_step))} of batches "
                   f"faster than {given(lb.rate_gbps) or 0:.1f} GB/s (what this run shows it keeping, at least the "
                   f"slowest seen at capture); time it with traceinspect.capture.profile(probe_loader=True) to know")
    elif lb is not None and lb.period_us:
        who = {"workers": "its workers' busy time", "pinning thread": "its pinning thread's CPU time"}.get(
            given(lb.limited_by), "measured at capture")
        per_step = given(lb.batches_per_step)
        per = f", {per_step:.0f} a step" if isinstance(per_step, (int, float)) else ""
        out.append(f"capped by the DataLoader: it delivers a batch every {fmt.ms(lb.period_us)} at best ({who} "
                   f"during the recorded steps{per}), so {fmt.ms(lb.cut_us)} more would not shorten the step")
    return out


def rank_of(entry: dict) -> str:
    """The rank a per-rank evidence record is about, as text (``?`` where it names none)."""
    rank = evidence_rank(entry)
    return "?" if rank is None else str(rank)


def _units(f: FindingDoc) -> dict[str, str]:
    """The units the finding's rule declares for its evidence fields (``format.units_of``)."""
    return fmt.units_of(f.id)


def evidence_rows(f: FindingDoc) -> tuple[list[str], list[tuple[str, list[str]]], int, list[tuple[str, str]]]:
    """A finding's evidence as labelled values: (rank columns, [(label, [value per rank])], ranks left out,
    [(label, value)] of the evidence that is not per rank). Steps are in the finding's meta line."""
    ev = f.evidence
    units = _units(f)
    per_rank = f.per_rank_evidence()
    cols, rows, left = [], [], 0
    if per_rank:
        shown = per_rank[:8]
        keys = [k for k in dict.fromkeys(k for x in shown for k in x) if k not in ("rank", "steps")]
        cols = [f"rank {rank_of(x)}" for x in shown]
        rows = [(fmt.label(k), [fmt.value(k, x.get(k), units=units) for x in shown]) for k in keys]
        left = len(per_rank) - len(shown)
    rest = [(fmt.label(k), fmt.value(k, v, units=units)) for k, v in ev.items()
            if k not in ("steps", "rank") and v is not None and not (k == "per_rank" and cols)]
    return cols, rows, left, rest


def evidence_lines(f: FindingDoc, rank=None, limit: int | None = None, width: int | None = None,
                   items: int = 6) -> list[str]:
    """``label: value`` lines of one rank's evidence (the given rank, else the first listed), then the rest; at
    most ``limit`` lines of at most ``width`` characters (the JSON report has all of it)."""
    per_rank = f.per_rank_evidence()
    lines = [f"{k}: {v}" for k, v in fmt.evidence_items(f.evidence, rank, items=items, units=_units(f))]
    if per_rank:
        # whose evidence this is (the rank the title names): the record evidence_items shows
        lines.insert(0, f"rank: {rank_of(f.evidence_for(rank))}")
    if width:
        lines = [x if len(x) <= width else x[: width - 2].rstrip(" ,;") + " \u2026" for x in lines]
    if limit and len(lines) > limit:
        lines = lines[:limit] + [f"(and {fmt.count(len(lines) - limit, 'more value')} in the JSON report)"]
    if per_rank and len(per_rank) > 1:
        lines.append(f"(and {fmt.count(len(per_rank) - 1, 'more rank')} in the JSON report)")
    return lines


def skipped(d: ReportDoc) -> list[str]:
    return [f"{safe.path(s.file)}: {safe.path(s.reason)}" for s in d.skipped]
