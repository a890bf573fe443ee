"""The ``Finding`` type rules emit, and severities."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..severities import SEVERITIES, severity_rank

__all__ = ["SEVERITIES", "severity_rank", "Finding"]


@dataclass(frozen=True)
class Finding:
    """A problem found in the run: evidence, not opinion.

    ``evidence`` holds the numbers that triggered the rule (raw units: us, bytes) and the threshold crossed;
    ``time_at_stake_us`` estimates the time per step the fix could win (None when it cannot be estimated).
    """

    id: str
    title: str
    ranks: list[int]
    steps: list[int]
    evidence: dict
    fix: str
    time_at_stake_us: float | None = None
    # Graded once, from the finding's claim, by the one scale (severity.py, in the accounting); a rule sets none.
    severity: str = "info"
    docs: str = ""  # where the rule's documentation is; "" = its ``explain`` command
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = asdict(self)
        d = {"id": d.pop("id"), "severity": d.pop("severity"), **d}  # the JSON's order since 1.0
        d["docs"] = self.docs or f"traceinspect explain {self.id}"
        d.pop("extra")
        d.update(self.extra)
        return d
