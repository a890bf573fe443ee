"""How a rule's claim is taken (``_rule.Claim``'s ``gpu`` and ``cpu``): per step, from the rank's pools.

Each kind gives the accounting (accounting.py, docs/findings.md) a list of (pool, want) for one rank: ``want`` an
array of us per step, None (take what the previous pool could not hold), or a function of what the claim got so
far. Its ``describe`` is what docs/findings.md's claim table says it takes (tables.py). The rule contract
(_rule.py) only names these types: a report read from the cache imports it, and neither numpy nor pandas.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .bounds import col


@dataclass(frozen=True)
class Column:
    """A step column, times ``scale``, from one pool."""

    pool: str
    column: str
    scale: float = 1.0
    fallback: str | None = None  # the column read where a step table lacks ``column`` (made before it existed)

    def demands(self, f, ra, s, config, estimate: float) -> list:
        v = col(s, self.column if self.column in s or self.fallback is None else self.fallback)
        return [(self.pool, v * self.scale if self.scale != 1.0 else v)]

    def describe(self) -> str:
        scaled = f"{self.scale:g} x " if self.scale != 1.0 else ""
        return f"`{self.pool}`: {scaled}`{self.column}`"


@dataclass(frozen=True)
class Estimate:
    """The rule's own per-step estimate (``Claim.estimate_key``), from the pools in order: what the first cannot
    hold spills to the next."""

    pools: tuple[str, ...]

    def demands(self, f, ra, s, config, estimate: float) -> list:
        return [(self.pools[0], np.full(len(s), estimate))] + [(p, None) for p in self.pools[1:]]

    def describe(self) -> str:
        return ", then ".join(f"`{p}`" for p in self.pools) + ": the rule's estimate"


@dataclass(frozen=True)
class Rest:
    """Whatever the pools have left: a symptom claims only what no cause explained."""

    pools: tuple[str, ...]

    def demands(self, f, ra, s, config, estimate: float) -> list:
        return [(p, np.full(len(s), np.inf)) for p in self.pools]

    def describe(self) -> str:
        return ", ".join(f"`{p}`" for p in self.pools) + ": whatever is left"


@dataclass(frozen=True)
class Custom:
    """A claim the rule computes itself: ``fn(finding, ra, steps, config) -> [(pool, want), ...]``."""

    fn: Callable
    text: str  # what it takes, for docs/findings.md

    def demands(self, f, ra, s, config, estimate: float) -> list:
        return self.fn(f, ra, s, config)

    def describe(self) -> str:
        return self.text


Take = Column | Estimate | Rest | Custom
