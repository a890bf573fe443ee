"""Events of a category the analyses do not model, counted by category instead of dropped without a word.

A complete event (``"ph": "X"``) is kept when its category is one of ``trace.CATEGORY_KIND``; a few host-side
categories are read and left out on purpose (``NOT_NEEDED``). Any other category is *unmodelled*: another device's
activity (MTIA's ``dma_request``, an XPU or HPU runtime, a GPU activity type newer than this tool), so the report
names it and its count (``RankTrace.unmodelled``, the rank's ``unmodelled`` in the JSON report) and says that its
time is in no number.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

# Complete-event categories left out on purpose: host-side records that no analysis reads (Python frames, the
# profiler's own overhead and its whole-window span, instant markers, correlation records, profiler ranges).
NOT_NEEDED = frozenset({"python_function", "overhead", "trace", "cpu_instant_event", "external_correlation",
                        "cuda_profiler_range"})
# At most this many categories are named; the rest are counted together under OTHER (a file can hold any number).
MAX_NAMED = 16
OTHER = "(other categories)"
# Events dropped because their time is no time (NaN, infinite, a negative duration, beyond any clock): counted
# under this name with the unmodelled ones, so that the report names the file they were in.
IMPOSSIBLE = "(impossible times: NaN, infinite or negative)"
# A category name is kept to this many characters (it is data: shown, never interpreted).
MAX_NAME = 80


def unmodelled(counts: Iterable[tuple[object, int]], kind_of) -> dict[str, int]:
    """Of (category, events) pairs, those of a category (a non-empty string) that ``kind_of`` does not keep and
    that is not ``NOT_NEEDED``, summed per category."""
    out: Counter = Counter()
    for c, n in counts:
        if isinstance(c, str) and c and kind_of(c) < 0 and c.lower() not in NOT_NEEDED:
            out[c] += int(n)
    return capped(out)


def merged(counts: Iterable[dict | None]) -> dict[str, int]:
    """The sum of several pieces' (or files') counts, capped as one."""
    total: Counter = Counter()
    for c in counts:
        total.update(c or {})
    return capped(total)


def capped(counts: dict[str, int]) -> dict[str, int]:
    """The ``MAX_NAMED`` most frequent categories by name (names cut at ``MAX_NAME``), the rest summed as OTHER."""
    if not counts:
        return {}
    order = sorted(((c, n) for c, n in counts.items() if c != OTHER), key=lambda kv: (-kv[1], kv[0]))
    out: Counter = Counter()
    for name, n in order[:MAX_NAMED]:
        out[name[:MAX_NAME]] += int(n)
    rest = int(counts.get(OTHER, 0)) + sum(int(n) for _, n in order[MAX_NAMED:])
    if rest:
        out[OTHER] += rest
    return dict(out)
