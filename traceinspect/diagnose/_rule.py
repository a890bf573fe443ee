"""The rule contract: what a rule module declares beside its detection, and what the accounting reads.

A rule module ends with one ``RULE = Rule(...)``: its id and title, what it reads (``Needs``), how its claim is
taken (``Claim``: the pools, per basis, in order, as the kinds of takes.py, and where it stands in the claim
order), its label in the verdict, the settings it reads (``Thresholds`` fields: what ``explain`` lists and ``--set``
changes), its evidence type (a ``msgspec.Struct``; the finding's JSON ``evidence`` is that record, key for key) and
its fix as a function of that evidence (``fix(evidence, setup=None) -> str``; ``setup``: what the run is, where a
caller knows it). The accounting (accounting.py) iterates over these declarations and never asks which rule it
holds.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Callable, NamedTuple

import msgspec

from ..thresholds import Thresholds
from .finding import Finding

if TYPE_CHECKING:
    from .takes import Take


@dataclass(frozen=True)
class Needs:
    """What a rule reads from each rank: checked before it runs."""

    steps: tuple[str, ...] = ()  # step columns on every rank
    gpu_steps: tuple[str, ...] = ()  # step columns on GPU-basis ranks (CPU-only traces have no kernels or copies)
    tables: tuple[str, ...] = ()  # per-rank tables (``ra.tables``)


@dataclass(frozen=True)
class Claim:
    """How much of a step a rule's finding may claim (accounting.py)."""

    order: int  # claim order: lower claims first (specific causes first, symptoms last)
    gpu: Take | None  # what it takes on a GPU-basis rank; None: nothing
    cpu: Take | None  # ... on a CPU-only rank (the training thread's split)
    estimate_key: str | None = None  # per-rank evidence key holding the rule's own estimate (us per step)
    other_ranks: bool = False  # its fix shortens the other ranks' waits, not its own step (a straggler)
    adds_cpu: Callable | None = None  # (steps, config) -> CPU us per step the fix adds, off the room a faster GPU has
    fixes_loader: bool = False  # the fix is the DataLoader's own: not bounded by it; GPU savings may wait for it
    symptom: bool = False  # claims what the causes left, and lists which causes explained it (``explained_by``)
    # GPU-basis pool time the finding explains beyond its claim: taken off the pool after the claim, unclaimed, so a
    # symptom does not claim it again (idle its fix does not remove, which no other finding's fix removes either)
    explains: Take | None = None
    # Its fix removes time an earlier finding explained but left unclaimed (``explains``: what that finding's fix
    # leaves, such as the launch wait around work a graph of the model keeps on the CPU): it may take that first.
    claims_explained: bool = False
    # ``(steps) -> us per step`` its fix itself leaves of what it takes (a whole-step graph's own launch): taken off
    # the pools with the claim, then not claimed, so no later finding claims it either
    keeps: Callable | None = None
    # A memory finding claims bytes of peak memory (its evidence's ``bytes_at_stake``), never time: apart from the
    # waterfall. ``memory(finding, config) -> (severity, reason)`` grades it (docs/memory.md).
    memory: Callable | None = None


@dataclass(frozen=True)
class Rule:
    """One rule's declaration (see the module docstring)."""

    id: str  # stable: the JSON contract
    title: str
    needs: Needs
    claim: Claim
    label: str  # its name in the verdict line ("dataloader 43.7 ms, pageable copies 17.7 ms")
    thresholds: tuple[str, ...]  # the Thresholds fields it reads, its claim's included
    evidence: type  # the msgspec.Struct of its evidence
    fix: Callable  # fix(evidence, setup=None) -> code to paste
    check: Callable  # check(report, config) -> list[Finding]; config: the Thresholds
    # The parallel strategies it applies to (``Strategy.kinds``: "ddp", "fsdp1", "fsdp2", "tp", "pp"); None: any.
    # A run that shows strategies, none of them these, is not checked (DDP's rules never fire on FSDP or PP).
    strategies: tuple[str, ...] | None = None

    def applies_to(self, kinds: tuple[str, ...]) -> bool:
        """Whether the rule runs on a run showing ``kinds`` (empty: no strategy seen, so every rule runs)."""
        return self.strategies is None or not kinds or any(k in self.strategies for k in kinds)

    @property
    def doc(self) -> str:
        """The rule module's docstring: its documentation (what ``explain`` prints)."""
        module = getattr(self.check, "module", None) or self.check.__module__
        return (sys.modules[module].__doc__ or "").strip()

    # The module-style names the rest of the code reads (``rule.ID``, ``rule.NEEDS``).
    @property
    def ID(self) -> str:  # noqa: N802
        return self.id

    @property
    def TITLE(self) -> str:  # noqa: N802
        return self.title

    @property
    def NEEDS(self) -> Needs:  # noqa: N802
        return self.needs


def declared(module) -> Rule:
    """A rule module's declaration, checked: a module without one, or whose thresholds are not ``Thresholds``
    fields, cannot load (``load_rules`` reports it)."""
    rule = getattr(module, "RULE", None)
    if not isinstance(rule, Rule):
        raise TypeError(f"{module.__name__} declares no RULE = Rule(...)")
    known = {f.name for f in fields(Thresholds)}
    unknown = [n for n in rule.thresholds if n not in known]
    if unknown:
        raise TypeError(f"rule {rule.id} declares unknown setting(s): {', '.join(unknown)}")
    if not (isinstance(rule.evidence, type) and issubclass(rule.evidence, msgspec.Struct)):
        raise TypeError(f"rule {rule.id}: evidence must be a msgspec.Struct")
    return rule


def as_dict(v):
    """A record as the JSON evidence: its fields in order, an unset field left out, and the fields a record keeps
    for its fix only (its class's ``FIX_ONLY``); values as they are."""
    if isinstance(v, msgspec.Struct):
        skip = getattr(type(v), "FIX_ONLY", ())
        return {k: as_dict(x) for k in v.__struct_fields__
                if k not in skip and (x := getattr(v, k)) is not msgspec.UNSET}
    if isinstance(v, list):
        return [as_dict(x) for x in v]
    if isinstance(v, dict):
        return {k: as_dict(x) for k, x in v.items()}
    return v


# --- the skeleton of a rule: one finding from the ranks where the problem is ---------------------------------------

def finding(rule: Rule, evidence, *, title: str, ranks, steps, stake: float | None, setup=None):
    """The rule's finding: its evidence record as the JSON evidence and its fix made from that record. Ungraded:
    the accounting gives it its claim and severity."""
    return Finding(id=rule.id, title=title, ranks=sorted(ranks), steps=sorted(steps), evidence=as_dict(evidence),
                   fix=rule.fix(evidence, setup), time_at_stake_us=stake)


class RankHit(msgspec.Struct, kw_only=True):
    """The part every rule's per-rank evidence starts with: the rank and the steps where the problem is."""

    rank: int
    steps: list[int]


class Hit(NamedTuple):
    ev: RankHit  # the rank's evidence record
    ra: object  # the rank's analysis (RankAnalysis)
    aux: object = None  # what the rule's summary needs of the rank beyond its evidence


def per_rank_finding(rule: Rule, report, config, detect: Callable, summary: Callable,
                     worst: Callable | None = None) -> list:
    """A rule that looks at each rank alone: ``detect(ra, config, report)`` gives the rank's evidence record, or
    (record, aux) (None: not there); the rank the title names has the largest ``worst(record)`` (the first on ties;
    without ``worst``, the first rank) and is listed first; ``summary(hits, worst_hit, report, config)`` gives (the
    finding's evidence record, its title, its time at stake per step)."""
    hits = []
    for ra in report.ranks:
        got = detect(ra, config, report)
        if got is not None:
            hits.append(Hit(got[0], ra, got[1]) if isinstance(got, tuple) else Hit(got, ra))
    if not hits:
        return []
    w = max(hits, key=lambda h: worst(h.ev)) if worst else hits[0]
    hits.sort(key=lambda h: h is not w)  # the rank the title names comes first (renderers show it)
    evidence, title, stake = summary(hits, w, report, config)
    return [finding(rule, evidence, title=title, ranks=[h.ev.rank for h in hits],
                    steps={s for h in hits for s in h.ev.steps}, stake=stake,
                    setup=getattr(w.ra, "setup", None))]  # the fix is fitted to the rank the title names


@dataclass(frozen=True)
class PerRank:
    """The ``check`` of a rule that looks at each rank alone: ``per_rank_finding`` with the rule's detection."""

    detect: Callable  # (ra, config, report) -> the rank's evidence record, or (record, aux), or None
    summary: Callable  # (hits, worst_hit, report, config) -> (evidence record, title, time at stake)
    worst: Callable | None = None  # record -> what makes a rank the one the title names

    @property
    def module(self) -> str:
        return self.detect.__module__

    def __call__(self, report, config) -> list:
        return per_rank_finding(sys.modules[self.module].RULE, report, config, self.detect, self.summary, self.worst)


@dataclass(frozen=True)
class Fixed:
    """A fix that is the same whatever the evidence."""

    text: str

    def __call__(self, evidence, setup=None) -> str:
        return self.text
