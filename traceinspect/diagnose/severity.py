"""The one severity scale (docs/findings.md, "Severity"): share of the step at stake, absolute floors, the
step-to-step noise, thin evidence."""

from __future__ import annotations

from .finding import Finding


def thin(f: Finding, nsteps: int, config) -> str | None:
    if nsteps < config.thin_evidence_min_steps:
        return f"{nsteps} step(s) analyzed, fewer than {config.thin_evidence_min_steps}"
    matched = (f.evidence or {}).get("matched_collectives")
    if matched is not None and matched < config.thin_evidence_min_collectives:
        return f"{matched} matched collective(s), fewer than {config.thin_evidence_min_collectives}"
    holds_if = (f.evidence or {}).get("saving_holds_if")
    if holds_if:  # a saving that rests on what the trace cannot show
        return f"the saving assumes {holds_if}"
    return None


def grade(claim: float | None, step: float | None, se: float | None, thin: str | None, config,
          rank: int | None = None) -> tuple[str, str]:
    """The one severity scale (docs/findings.md): share of the step at stake, absolute floors, noise, evidence.
    ``rank``: the rank whose step it is, named where a run has several (their steps differ)."""
    if claim is None or not step:
        return "info", "no time at stake could be measured"
    share = claim / step
    c_share, c_us = config.severity_critical_share, config.severity_critical_min_us
    w_share, w_us = config.severity_warning_share, config.severity_warning_min_us
    amount = f"{claim / 1000:.2f} ms" if claim >= 10 else f"{claim:.1f} us"
    whose = "a" if rank is None else f"rank {rank}'s"
    head = f"{amount} of {whose} {step / 1000:.2f} ms step ({100 * share:.1f} %)"
    if share < w_share or claim < w_us:
        return "info", f"{head}: below the warning line ({100 * w_share:.0f} % and {w_us / 1000:.1f} ms)"
    noise = config.severity_noise_se * se if se is not None else None
    if noise is not None and claim < noise:
        return "info", (f"{head}: within the step-to-step noise ({config.severity_noise_se:.0f} standard errors of "
                        f"the mean step without it = {noise / 1000:.2f} ms), so a fix could not be confirmed by "
                        "measuring")
    if share >= c_share and claim >= c_us:
        if thin:
            return "warning", f"{head}: at most a warning, thin evidence: {thin}"
        return "critical", f"{head}: at least {100 * c_share:.0f} % and {c_us / 1000:.1f} ms"
    return "warning", f"{head}: at least {100 * w_share:.0f} % and {w_us / 1000:.1f} ms" + (
        f" (thin evidence: {thin})" if thin else "")
