"""The rules: one module each, a stable id, the module docstring is the rule's documentation.

A rule module defines ``ID`` (stable, used in the JSON contract), ``TITLE`` and ``check(report, config) ->
list[Finding]``. ``check`` reads only the analyzed report (per-rank step tables and summaries), never raw events,
so rules run the same whether ranks were analyzed locally or on a cluster.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# Order = the order findings are listed in when severities tie.
RULE_MODULES = (
    "pageable_memcpy",
    "dataloader_stall",
    "host_sync",
    "gpu_idle",
    "small_buckets",
    "sync_every_microstep",
    "exposed_comm",
    "straggler",
    "no_mixed_precision",
    "gradscaler_with_bf16",
    "launch_bound",
    "optimizer_not_fused",
    "tensor_core_alignment",
)


def all_rules() -> list[ModuleType]:
    """Rule modules that exist in this build, in listing order."""
    out = []
    for name in RULE_MODULES:
        try:
            out.append(importlib.import_module(f"{__name__}.{name}"))
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
    return out


def get_rule(rule_id: str) -> ModuleType | None:
    for mod in all_rules():
        if mod.ID == rule_id:
            return mod
    return None


def doc_of(mod: ModuleType) -> str:
    return (mod.__doc__ or "").strip()
