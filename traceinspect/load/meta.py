"""Reading the trace object's own keys with their types checked.

Writers disagree and files get damaged: ``baseTimeNanoseconds`` may be ``"NaN"``, ``deviceProperties`` a number,
``distributedInfo`` a list. Every value read from a trace goes through these accessors, which return ``None`` (or
an empty container) for a value of the wrong type instead of raising.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from .limits import DEFAULT_LIMITS

_RANK_IN_NAME = re.compile(r"(?:rank|worker|rk)[-_]?(\d+)", re.IGNORECASE)
# Lightning's PyTorchProfiler names files "<stage>[-<filename>]-<local_rank>[-<action>].<time>.pt.trace.json".
_LIGHTNING_NAME = re.compile(r"^(?:fit|validate|test|predict|sanity_check)(?:-[^.]*?)?-(\d+)(?=[-.])")
_I64 = 1 << 63


def as_int(v) -> int | None:
    """An integer from an int, an integral finite float or a string of digits; else None (bools are not ints)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if -_I64 <= v < _I64 else None
    if isinstance(v, float):
        return int(v) if math.isfinite(v) and v == int(v) and abs(v) < 2**63 else None
    if isinstance(v, str) and re.fullmatch(r"\s*-?\d{1,19}\s*", v):
        return as_int(int(v))
    return None


def as_str(v) -> str | None:
    return v if isinstance(v, str) else None


def as_dict(v) -> dict:
    return v if isinstance(v, dict) else {}


def as_list(v) -> list:
    return v if isinstance(v, list) else []


def base_ns(meta: dict) -> int | None:
    """``baseTimeNanoseconds`` (the clock origin of ``ts``) when it is a usable non-negative integer."""
    b = as_int(meta.get("baseTimeNanoseconds"))
    return b if b is not None and b >= 0 else None


def distributed(meta: dict, max_world: int = DEFAULT_LIMITS.max_world_size) -> dict:
    """``distributedInfo`` with its known fields of the right type (a field of another type is left out, and so
    is a world size above ``max_world``: see ``implausible_world``)."""
    d = dict(as_dict(meta.get("distributedInfo")))
    for k in ("rank", "world_size", "pg_count"):
        if k in d and as_int(d[k]) is None:
            del d[k]
    if "world_size" in d and not 0 < as_int(d["world_size"]) <= max_world:
        del d["world_size"]
    for k in ("backend", "nccl_version"):
        if k in d and not isinstance(d[k], str):
            del d[k]
    if "pg_config" in d:
        d["pg_config"] = [pg for pg in as_list(d["pg_config"]) if isinstance(pg, dict)]
    return d


# Sections of our capture metadata that are objects; the rules read their keys.
_CAPTURE_SECTIONS = ("workload", "dataloader", "ddp", "capture", "loader_probe", "loader_timing", "process_threads")


def capture_meta(meta: dict) -> dict:
    """Our own capture metadata (the ``traceinspect`` key), if any, its sections objects or left out."""
    d = dict(as_dict(meta.get("traceinspect")))
    for k in _CAPTURE_SECTIONS:
        if k in d and not isinstance(d[k], dict):
            del d[k]
    return d


def rank_of(meta: dict, path: str) -> int | None:
    """distributedInfo's rank, else our capture metadata's, else a rank written in the file name."""
    for r in (distributed(meta).get("rank"), capture_meta(meta).get("rank")):
        r = as_int(r)
        if r is not None and r >= 0:
            return r
    name = Path(path).name
    m = _RANK_IN_NAME.search(name) or _LIGHTNING_NAME.match(name)
    return int(m.group(1)) if m else None


def world_of(meta: dict, max_world: int = DEFAULT_LIMITS.max_world_size) -> int | None:
    """The world size the metadata states, when it is a plausible one (1 to ``max_world``, Limits.max_world_size)."""
    for w in _stated_worlds(meta):
        if 0 < w <= max_world:
            return w
    return None


def implausible_world(meta: dict, max_world: int = DEFAULT_LIMITS.max_world_size) -> int | None:
    """A world size the metadata states above ``max_world``: a number no job has, read as unknown (a world size is
    never an allocation size: missing ranks are not counted up to it)."""
    return next((w for w in _stated_worlds(meta) if w > max_world), None)


def _stated_worlds(meta: dict) -> list[int]:
    raw = (as_dict(meta.get("distributedInfo")).get("world_size"), capture_meta(meta).get("world_size"))
    return [w for w in map(as_int, raw) if w is not None]


def host_of(meta: dict) -> str | None:
    """The host name newer torch writes (``host_name``)."""
    return as_str(meta.get("host_name")) or None


def job_identity(meta: dict, max_world: int = DEFAULT_LIMITS.max_world_size) -> tuple:
    """What every rank of one job writes alike: backend, world size, NCCL version (None where absent)."""
    d = distributed(meta)
    return (as_str(d.get("backend")), world_of(meta, max_world), as_str(d.get("nccl_version")))


def device_info(meta: dict, device_id: int | None) -> tuple[str | None, tuple[int, int] | None]:
    """Name and compute capability of the device the events ran on (``deviceProperties`` entry of that id)."""
    props = [p for p in as_list(meta.get("deviceProperties")) if isinstance(p, dict)]
    if not props:
        return None, None
    chosen = next((p for p in props if device_id is not None and as_int(p.get("id")) == device_id), props[0])
    major, minor = as_int(chosen.get("computeMajor")), as_int(chosen.get("computeMinor"))
    return as_str(chosen.get("name")), ((major, minor or 0) if major is not None else None)


# No device has a petabyte of memory: a larger ``totalGlobalMem`` is a damaged value, not a capacity.
_MAX_DEVICE_BYTES = 1 << 50


def device_capacities(meta: dict) -> dict[int, int]:
    """Device id -> its memory in bytes (``deviceProperties[].totalGlobalMem``), for the entries whose id and size
    are plausible integers."""
    out: dict[int, int] = {}
    for p in as_list(meta.get("deviceProperties")):
        if not isinstance(p, dict):
            continue
        i, total = as_int(p.get("id")), as_int(p.get("totalGlobalMem"))
        if i is not None and i >= 0 and total is not None and 0 < total < _MAX_DEVICE_BYTES:
            out[i] = total
    return out
