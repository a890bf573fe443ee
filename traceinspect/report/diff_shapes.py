"""Kernels by name and launch shape for the diff (pure; no I/O).

A rank's inventory (``analyze/inventory.py``) has each kernel name's count and GPU time per step; the trace files
give each name's launches by shape (``cli/diff_shapes.py``: grid and block, counted over the whole files). A name's
count and time per step are split over its shapes in proportion to the shapes' counts and times in the files
(exact where a name has one shape, as most do). A kernel the trace records without a grid and block, and the
names summed under the inventory's ``(other names)``, keep the shape ``shape not recorded``.

The kernels of one name and shape are the same work; their GPU time per call is a rate. ``same_kernel_rate``
turns the comparison of those (``name_rows`` on (name, shape) keys) into a rate row of the work/rate table.
"""

from __future__ import annotations

from .diff_work import RATE_TOLERANCE, name_rows

NOT_RECORDED = "shape not recorded"


def by_shape(kernels: dict[str, list[float]], shapes: dict[str, dict[str, list[float]]]) -> dict:
    """(name, shape) -> [count, time] per step: each name of ``kernels`` split over its ``shapes``."""
    out: dict[tuple[str, str], list[float]] = {}
    for name, (count, us) in kernels.items():
        per = shapes.get(name) or {}
        n = sum(c for c, _ in per.values())
        t = sum(u for _, u in per.values())
        if not n:
            out[(name, NOT_RECORDED)] = [count, us]
            continue
        for shape, (c, u) in per.items():
            out[(name, shape)] = [count * c / n, us * (u / t if t else c / n)]
    return out


def shape_rows(base: list[dict] | None, new: list[dict] | None, top: int = 8) -> dict:
    """``name_rows`` of kernels keyed by (name, shape); each row's ``name`` is the kernel's name and ``shape`` its
    launch shape."""
    out = name_rows(base, new, "kernel shape", top)
    if out.get("available"):
        for row in out["changed"] + out["same"]:
            row["name"], row["shape"] = row["name"]
    return out


def same_kernel_rate(shapes: dict) -> dict | None:
    """The rate row of the kernels of the same name and shape on both sides with an unchanged count: their GPU
    time per step at the base's time per call (``base``) and as measured (``new``)."""
    if not shapes.get("available") or not shapes["same_names_base_rate_us"]:
        return None
    a, b = shapes["same_names_base_rate_us"], shapes["same_names_new_us"]
    rel = (b - a) / a
    return {"key": "gpu_same_kernels_us", "label": "GPU time of the same kernels (name and shape)", "unit": "us",
            "base": a, "new": b, "rel_change": rel, "effect_us": b - a, "changed": abs(rel) > RATE_TOLERANCE}
