"""What the per-rank stage hands on: frozen records, made once and never filled in afterwards.

Each per-rank analysis returns a ``RankPart`` (the tables and step columns it made, and the errors it met); the
stage composes the base step table, the base tables and every part, in order, into one ``RankAnalysis``. The
rules and the report read the ``RankAnalysis`` only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from .setup import Setup


@dataclass(frozen=True)
class RankPart:
    """What one per-rank analysis made: tables by name and step columns by name (one value per row of the base
    step table, in its order), both in the order they are added; ``errors``: one line each (the analysis failed)."""

    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    errors: tuple[str, ...] = ()


@dataclass(frozen=True)
class RankAnalysis:
    """Everything the rules and renderers need about one rank, in raw units (us, bytes)."""

    rank: int
    world_size: int | None
    files: list[str]
    device: str | None
    compute_capability: tuple[int, int] | None
    basis: str  # "gpu": GPU timeline breakdown; "cpu": the training thread's breakdown (no GPU events)
    steps: pd.DataFrame
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    metadata: dict = field(default_factory=dict)
    distributed: dict = field(default_factory=dict)
    base_ns: int = 0
    event_count: int = 0
    errors: list[str] = field(default_factory=list)
    setup: Setup | None = None  # what the run is (analyze/setup.py); None where it could not be read
    unmodelled: dict = field(default_factory=dict)  # events of categories no analysis models: category -> count
