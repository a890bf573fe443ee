"""docs/findings.md's per-rule tables, made from the rule declarations (_rule.Rule): the claim order and pools,
the verdict labels, the thresholds. A test keeps the doc equal to them; ``python -m traceinspect.diagnose.tables
docs/findings.md`` rewrites the part between the markers."""

from __future__ import annotations

import sys
from pathlib import Path

BEGIN = "<!-- rule tables: generated from the rule declarations (traceinspect/diagnose/tables.py); do not edit -->"
END = "<!-- end of the generated rule tables -->"


def _claim_notes(claim) -> str:
    notes = []
    if claim.estimate_key:
        notes.append(f"the estimate per rank: evidence `{claim.estimate_key}`")
    if claim.other_ranks:
        notes.append("claims on the *other* ranks (its fix shortens their waits)")
    if claim.adds_cpu is not None:
        notes.append(f"the CPU work its fix adds (`{claim.adds_cpu.__name__}`) is taken off `gpu_room`")
    if claim.fixes_loader:
        notes.append("the DataLoader's own fix: not bounded by the loader; GPU-side savings in the steps the loader "
                     "paced count `after` it")
    if claim.explains is not None:
        notes.append(f"explains, unclaimed, the rest of {claim.explains.describe()} (no symptom claims it; a later "
                     "finding whose fix removes it may)")
    if claim.claims_explained:
        notes.append("claims first what earlier findings explained and left unclaimed (`claims_explained`)")
    if claim.memory is not None:
        notes.append("claims bytes of peak memory (`bytes_at_stake`), no time: graded by its own memory scale "
                     "(docs/memory.md)")
    if claim.symptom:
        notes.append("a symptom: claims last, only what no cause explained, and lists the causes (`explained_by`)")
    return "; ".join(notes)


def claim_table(rules) -> str:
    """Findings in claim order: what each takes from which pools, per basis, and its label in the verdict."""
    lines = ["| order | finding | verdict label | GPU-basis claim | CPU-only claim | notes |",
             "| ---: | --- | --- | --- | --- | --- |"]
    for i, r in enumerate(sorted(rules, key=lambda r: r.claim.order), 1):
        gpu, cpu = (t.describe() if t is not None else "nothing" for t in (r.claim.gpu, r.claim.cpu))
        lines.append(f"| {i} | `{r.id}` | {r.label} | {gpu} | {cpu} | {_claim_notes(r.claim)} |")
    return "\n".join(lines)


def thresholds_table(rules) -> str:
    """Each rule's settings (what ``explain`` lists and ``--set`` changes): default and why."""
    from ..thresholds import DEFAULT, reason

    lines = ["| finding | setting | default | why |", "| --- | --- | ---: | --- |"]
    for r in rules:
        for n in r.thresholds:
            why = reason(n).replace("|", "\\|")  # a table cell
            value = getattr(DEFAULT, n)
            lines.append(f"| `{r.id}` | `{n}` | {value:.4g} | {why} |" if isinstance(value, float)
                         else f"| `{r.id}` | `{n}` | {value} | {why} |")
        if not r.thresholds:
            lines.append(f"| `{r.id}` | (none) | | |")
    return "\n".join(lines)


def findings_tables(rules=None) -> str:
    """The generated part of docs/findings.md, markers included."""
    if rules is None:
        from . import all_rules

        rules = all_rules()
    return "\n".join([
        BEGIN,
        "Findings claim in this order, each taking at most what its pools have left (a pool named first is taken "
        "first; `Estimate`: the rule's own per-step estimate, what the first pool cannot hold spilling to the "
        "next):",
        "",
        claim_table(rules),
        "",
        "The settings each rule reads (`traceinspect explain ID` lists them with their current values; change one "
        "with `--set NAME=VALUE`):",
        "",
        thresholds_table(rules),
        END,
    ])


def generated_part(text: str) -> str:
    """The part of a doc between the markers, markers included ("" where it has none)."""
    if BEGIN not in text or END not in text:
        return ""
    return text[text.index(BEGIN):text.index(END) + len(END)]


def rewrite(path: str) -> None:
    """Replace the generated part of the doc at ``path`` with the current tables."""
    p = Path(path)
    text = p.read_text()
    p.write_text(text.replace(generated_part(text), findings_tables()))


if __name__ == "__main__":
    rewrite(sys.argv[1])
