"""The ``Finding`` type rules emit, and severities."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

SEVERITIES = ("info", "warning", "critical")


def severity_rank(s: str) -> int:
    return SEVERITIES.index(s)


@dataclass(frozen=True)
class Finding:
    """A problem found in the run: evidence, not opinion.

    ``evidence`` holds the numbers that triggered the rule (raw units: us, bytes) and the threshold crossed;
    ``time_at_stake_us`` estimates the time per step the fix could win (None when it cannot be estimated).
    """

    id: str
    severity: str
    title: str
    ranks: list[int]
    steps: list[int]
    evidence: dict
    fix: str
    time_at_stake_us: float | None = None
    docs: str = ""  # where the rule's documentation is; "" = its ``explain`` command
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["docs"] = self.docs or f"traceinspect explain {self.id}"
        d.pop("extra")
        d.update(self.extra)
        return d
