"""One way to write numbers and units, for every renderer.

The report keeps raw units (microseconds, bytes, shares 0..1); these functions turn them into text: milliseconds,
MB (10^6 bytes), MiB where DDP means 2^20, GB/s, percentages and counts with their noun. ``None`` (unknown) is
always ``-``. No scientific notation, no raw floats. An evidence value is formatted by the unit its rule declares
for the field (``units_of(finding_id)``: ``render/evidence_units.py``, generated from the rules' evidence records,
where every number declares one); a key's name gives its label (``label``), never its unit.
"""

from __future__ import annotations

import math

from ..report.doc import evidence_entry
from . import safe
from .evidence_units import EVIDENCE_UNITS

DASH = "-"

_IRREGULAR = {"copy": "copies", "sample": "samples", "this": "these", "bus": "buses"}


def _bad(x) -> bool:
    return x is None or isinstance(x, bool) or not isinstance(x, (int, float)) or math.isnan(x) or math.isinf(x)


def number(x, digits: int = 3) -> str:
    """A plain number: integers with thousands separators, others to ``digits`` significant digits (no exponent)."""
    if _bad(x):
        return DASH
    if float(x) == int(x) and abs(x) < 1e15:
        return f"{int(x):,}"
    ax = abs(x)
    if ax >= 10 ** (digits - 1):
        return f"{x:,.0f}"
    decimals = digits - 1 - (math.floor(math.log10(ax)) if ax > 0 else 0)
    text = f"{x:.{max(decimals, 0)}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def ms_num(us, decimals: int = 2) -> str:
    """Microseconds as a bare number of milliseconds (tables whose header says ms)."""
    return DASH if _bad(us) else f"{round(us / 1000, decimals) + 0.0:.{decimals}f}"


def ms(us, decimals: int = 2) -> str:
    """Microseconds as milliseconds with the unit: ``17.74 ms``; below 10 us in microseconds (``4.2 us``)."""
    if _bad(us):
        return DASH
    if us and abs(us) < 10:
        return f"{us:.1f} us"
    return f"{ms_num(us, decimals)} ms"


def signed_ms(us, decimals: int = 2) -> str:
    return DASH if _bad(us) else f"{round(us / 1000, decimals) + 0.0:+.{decimals}f} ms"


def mb_num(b) -> str:
    return DASH if _bad(b) else f"{b / 1e6:.1f}"


def mb(b) -> str:
    """Bytes as MB (10^6 bytes): ``67.1 MB``; small amounts in KB or B."""
    if _bad(b):
        return DASH
    if abs(b) >= 1e5:
        return f"{b / 1e6:,.1f} MB"
    if abs(b) >= 1e3:
        return f"{b / 1e3:.1f} KB"
    return f"{b:.0f} B"


def mib(v) -> str:
    """A size in MiB as the user wrote it (DDP's bucket_cap_mb): 3 significant digits, ``0.01 MiB``."""
    return DASH if _bad(v) else f"{number(v)} MiB"


def gbps(v) -> str:
    return DASH if _bad(v) else f"{number(v)} GB/s"


def pct_num(share, decimals: int = 0) -> str:
    """A share 0..1 as a bare percentage (tables whose header says %)."""
    return DASH if _bad(share) else f"{round(100 * share, decimals) + 0.0:.{decimals}f}"


def pct(share, decimals: int = 1) -> str:
    """A share 0..1 as ``20.5 %``."""
    return DASH if _bad(share) else f"{pct_num(share, decimals)} %"


def share(part, whole) -> float | None:
    if _bad(part) or _bad(whole) or not whole:
        return None
    return part / whole


def plural(noun: str, n) -> str:
    if n == 1:
        return noun
    head, _, last = noun.rpartition(" ")
    word = _IRREGULAR.get(last) or (last[:-1] + "ies" if last.endswith("y") and last[-2:-1] not in "aeiou"
                                    else last + ("es" if last.endswith(("s", "x", "ch", "sh")) else "s"))
    return f"{head} {word}" if head else word


def count(n, noun: str, *, about: bool = False) -> str:
    """``count(1, "window")`` -> ``1 window``; ``count(4, "all-reduce call")`` -> ``4 all-reduce calls``."""
    if _bad(n):
        return f"{DASH} {plural(noun, 2)}"
    shown = number(round(n, 1) if not float(n).is_integer() else int(n))
    return f"{'about ' if about else ''}{shown} {plural(noun, 1 if shown == '1' else 2)}"


def ranges(xs) -> str:
    """[0, 1, 2, 5] -> ``0-2, 5``; empty -> ``-``."""
    xs = sorted(int(x) for x in xs or [])
    if not xs:
        return DASH
    out, start, prev = [], xs[0], xs[0]
    for x in xs[1:] + [None]:
        if x is not None and x == prev + 1:
            prev = x
            continue
        out.append(f"{start}-{prev}" if prev != start else f"{start}")
        if x is not None:
            start = prev = x
    return ", ".join(out)


# ---------------------------------------------------------------------------------------------------------------
# Evidence: labelled values with units

_TOKENS = {"h2d": "H2D", "d2h": "D2H", "d2d": "D2D", "cpu": "CPU", "gpu": "GPU", "ddp": "DDP", "nccl": "NCCL",
           "fp32": "fp32", "tf32": "TF32", "amp": "AMP", "sm": "SM"}
_UNIT_TOKENS = ("us", "bytes", "gbps", "mb", "ms")


def label(key: str) -> str:
    """``pageable_h2d_bytes_per_step`` -> ``pageable H2D per step``: the key without its unit, in words (a key that
    is a name read from the trace, shortened: ``safe.words``)."""
    key = safe.words(key)
    parts = str(key).split("_")
    words = [w for w in parts if w and w.lower() not in _UNIT_TOKENS]
    if not words:
        return str(key)
    # "idle_us_per_step": the unit was the noun (the words only; the value's unit is the declared one)
    if "us" in (p.lower() for p in parts) and not {"time", "period"} & set(words):
        at = words.index("per") if "per" in words else len(words)
        words.insert(at, "time")
    return " ".join(_TOKENS.get(w.lower(), w) for w in words)


#: A declared raw unit (diagnose/units.py) -> the unit it is shown in; "" a plain number.
SHOWN_AS = {"us": "ms", "bytes": "MB", "share": "%", "gbps": "GB/s", "mib": "MiB", "count": ""}


def units_of(finding_id: str) -> dict[str, str]:
    """Evidence key -> the unit it is shown in, as the rule ``finding_id`` declares it (``render/evidence_units.py``)."""
    return {k: SHOWN_AS[u] for k, u in EVIDENCE_UNITS.get(finding_id, {}).items()}


def with_unit(unit: str | None, v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if _bad(v):
        return DASH if not isinstance(v, str) else v
    return {"ms": ms, "MB": mb, "MiB": mib, "GB/s": gbps, "%": pct}.get(unit, number)(v)


def value(key: str, v, unit: str | None = None, depth: int = 0, items: int = 6,
          units: dict[str, str] | None = None) -> str:
    """One evidence value as text: numbers with their unit (``units``: key -> unit, as ``units_of`` gives; else
    ``unit``; else a plain number), dicts as ``name value, ...`` (a mapping's values in its own unit), lists joined
    (the first ``items`` entries of a list of records, then how many more); names shortened and the whole at most
    ``safe.VALUE_WIDTH`` characters (``safe.words``)."""
    text = _value(key, v, unit, depth, items, units or {})
    return safe.clip(text, safe.VALUE_WIDTH) if depth else safe.words(text, safe.VALUE_WIDTH)


def _value(key: str, v, unit: str | None, depth: int, items: int, units: dict[str, str]) -> str:
    if key in units and depth == 0:
        unit = units[key]
    if isinstance(v, dict):
        if depth >= 2:
            return f"{len(v)} entries"
        return ", ".join(f"{label(k)} {value(k, x, units.get(k, unit), depth + 1, units=units)}" for k, x in v.items())
    if isinstance(v, (list, tuple)):
        if all(isinstance(x, int) and not isinstance(x, bool) for x in v) and str(key) in ("steps", "ranks"):
            return ranges(v)
        if all(not isinstance(x, (dict, list)) for x in v):
            return ", ".join(value(key, x, unit, depth + 1, units=units) for x in v) or DASH
        more = f"; and {len(v) - items} more" if len(v) > items else ""
        return "; ".join(value(key, x, unit, depth + 1, units=units) for x in v[:items]) + more
    if isinstance(v, str):
        return safe.words(v, safe.VALUE_WIDTH)
    return with_unit(unit, v)


def evidence_items(ev: dict, rank=None, items: int = 6, units: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """(label, value text) pairs of a finding's evidence, for one rank (the given one, else the first listed), each
    in its declared unit (``units``: ``units_of(finding_id)``)."""
    src = evidence_entry(ev, rank) if isinstance(ev, dict) else ev
    n = items
    pairs = list((src or {}).items()) + ([(k, v) for k, v in ev.items() if k != "per_rank"] if src is not ev else [])
    skip = ("per_rank", "steps", "rank", "claim_note")  # the claim note is the finding's own line (finding_notes)
    return [(label(k), value(k, v, items=n, units=units)) for k, v in pairs if k not in skip and v is not None]
