"""Decoded files -> one ``RankTrace`` per rank: files grouped by the rank each names, a rank's files ordered as its
successive active windows on one clock, their columns made one events DataFrame (numeric arrays not copied)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import instants as _instants
from . import meta as M
from .decode import NUM_COLS, RAW_COLS, STR_COLS
from .files import FileResult
from .limits import DEFAULT_LIMITS
from .trace import RankTrace, Skipped
from .unmodelled import merged

if TYPE_CHECKING:
    import pandas as pd


def _frame(cols: dict, window: int, shift_us: float) -> pd.DataFrame:
    """Columns -> DataFrame without copying the numeric arrays; categoricals from their codes."""
    import pandas as pd  # here, not above: planning and decoding a folder need no pandas (load/prefetch.py)

    n = cols["n"]
    data: dict = {c: cols[c] for c in NUM_COLS}
    if shift_us:
        data["ts"] = data["ts"] + shift_us
    for col in STR_COLS:
        codes, strings = cols[col]
        data[col] = pd.Categorical.from_codes(codes, categories=pd.Index(strings, dtype=object), validate=False) \
            if strings else pd.Categorical.from_codes(np.full(n, -1, np.int8), categories=pd.Index([], dtype=object))
    for col in RAW_COLS:
        raw = cols[col]
        if isinstance(raw, np.ndarray):  # decoded: an object array already
            arr = raw
        else:  # from the cache (a list) or absent
            arr = np.empty(n, dtype=object)  # all None
            if raw is not None:
                arr[:] = raw
        data[col] = pd.Series(arr, dtype=object, copy=False)  # object, not str: None stays None
    data["window"] = np.full(n, window, np.int16)
    return pd.DataFrame(data, copy=False)


def _device_info(meta: dict, events: pd.DataFrame) -> tuple[str | None, tuple[int, int] | None]:
    gpu_pids = events.loc[events["kind"] >= 5, "pid"]
    dev_id = int(gpu_pids.mode().iloc[0]) if len(gpu_pids) else None
    return M.device_info(meta, dev_id)


def group_results(results: list[FileResult]) -> list[tuple[int, list[FileResult]]]:
    """Files given as a list (not a folder): group by the rank each names; files naming none get free ranks."""
    by_rank: dict[int, list[FileResult]] = {}
    unranked: list[FileResult] = []
    for fr in results:
        r = M.rank_of(fr.meta, fr.path)
        (by_rank.setdefault(r, []) if r is not None else unranked).append(fr)
    next_free = 0
    for fr in sorted(unranked, key=lambda f: f.path):
        while next_free in by_rank:
            next_free += 1
        by_rank[next_free] = [fr]
    return sorted(by_rank.items())


def assemble(groups: list[tuple[int, list[FileResult]]], max_world: int = DEFAULT_LIMITS.max_world_size
             ) -> tuple[list[RankTrace], list[Skipped]]:
    """One RankTrace per (rank, files); several files of one rank are successive active windows."""
    import pandas as pd

    skipped: list[Skipped] = []
    ranks = []
    for r, frs in groups:
        bases = [M.base_ns(f.meta) or 0 for f in frs]
        base = min(bases)
        # Order windows by their start on the common clock.
        spans = []
        for f, b in zip(frs, bases):
            ts = f.columns["ts"]
            shift = (b - base) / 1000.0
            spans.append((shift + float(ts.min()), shift + float((ts + f.columns["dur"]).max())) if len(ts) else (shift, shift))
        order = list(np.argsort([sp[0] for sp in spans], kind="stable"))
        # Successive windows of one rank never overlap in time; a file that does is another run's (or a copy).
        kept = []
        for i in order:
            clash = next((j for j in kept if spans[i][0] < spans[j][1] and spans[j][0] < spans[i][1]), None)
            if clash is not None:
                skipped.append(Skipped(file=frs[i].path, reason=f"rank {r} again, overlapping {frs[clash].path} in time "
                                                                 "(a copy, or a file from another run)"))
                continue
            kept.append(i)
        order = kept
        frames = []
        other = merged(frs[i].columns.get("unmodelled") for i in order)
        instants = _instants.frame([(frs[i].columns.get("instants"), (bases[i] - base) / 1000.0) for i in order])
        for w, i in enumerate(order):
            f = frs[i]
            frames.append(_frame(f.columns, w, (bases[i] - base) / 1000.0))
            f.columns = {}  # free the arrays as soon as the frame holds them
        events = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        if len(frames) > 1:
            for col in ("name", "dtype", "coll", "pg"):
                if not isinstance(events[col].dtype, pd.CategoricalDtype):
                    events[col] = events[col].astype("category")
        first = frs[order[0]]
        frs_used = [frs[i] for i in order]
        name, cc = _device_info(first.meta, events)
        ranks.append(
            RankTrace(
                rank=r,
                world_size=M.world_of(first.meta, max_world),
                files=[f.path for f in frs_used],
                events=events,
                base_ns=base,
                device_name=name,
                compute_capability=cc,
                distributed=M.distributed(first.meta, max_world),
                metadata=M.capture_meta(first.meta),
                windows=len(frs_used),
                unmodelled=other,
                instants=instants,
                device_capacity=M.device_capacities(first.meta),
            )
        )
    return ranks, skipped
