"""The rules: one module each, a stable id, the module docstring is the rule's documentation.

A rule module defines ``ID`` (stable, used in the JSON contract), ``TITLE``, ``NEEDS`` (the step columns and
tables it reads) and ``check(report, config) -> list[Finding]``. ``check`` reads only the analyzed report (per-rank
step tables and summaries), never raw events, so rules run the same whether ranks were analyzed locally or on a
cluster. A rule module that cannot be imported, or whose needs a rank does not meet, is an error in the report
(``errors``), never a silent skip; the other rules still run.
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass, fields
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


@dataclass(frozen=True)
class Needs:
    """What a rule reads from each rank: checked before it runs."""

    steps: tuple[str, ...] = ()  # step columns on every rank
    gpu_steps: tuple[str, ...] = ()  # step columns on GPU-basis ranks (CPU-only traces have no kernels or copies)
    tables: tuple[str, ...] = ()  # per-rank tables (``ra.tables``)


def load_rules() -> tuple[list[ModuleType], list[str]]:
    """(rule modules in listing order, one error line per rule module that cannot be imported)."""
    out, errors = [], []
    for name in RULE_MODULES:
        try:
            out.append(importlib.import_module(f"{__name__}.{name}"))
        except Exception as exc:  # a broken rule module must not take the other rules down
            errors.append(f"rule module {name} cannot be loaded: {type(exc).__name__}: {exc}")
    return out, errors


def all_rules() -> list[ModuleType]:
    """Rule modules that load, in listing order (``load_rules`` also says which do not)."""
    return load_rules()[0]


def get_rule(rule_id: str) -> ModuleType | None:
    for mod in all_rules():
        if mod.ID == rule_id:
            return mod
    return None


def doc_of(mod: ModuleType) -> str:
    return (mod.__doc__ or "").strip()


def missing_needs(rule: ModuleType, report) -> list[str]:
    """One error line per rank whose step table or tables lack what ``rule.NEEDS`` names."""
    needs: Needs = rule.NEEDS
    out = []
    for ra in report.ranks:
        cols = set(needs.steps) | (set(needs.gpu_steps) if ra.basis == "gpu" else set())
        lacking = sorted(cols - set(ra.steps.columns)) + sorted(f"table {t}" for t in needs.tables
                                                                if t not in ra.tables)
        if lacking:
            out.append(f"rule {rule.ID} cannot run on rank {ra.rank}: missing {', '.join(lacking)}")
    return out


def run_rules(report, config) -> list:
    """Every rule on ``report``; a rule with unmet needs or that raises adds a line to ``report.errors``."""
    rules, errors = load_rules()
    report.errors.extend(errors)
    findings = []
    for rule in rules:
        unmet = missing_needs(rule, report)
        if unmet:
            report.errors.extend(unmet)
            continue
        try:
            findings.extend(rule.check(report, config))
        except Exception as exc:  # a broken rule must not take the report down with it
            report.errors.append(f"rule {rule.ID} failed: {type(exc).__name__}: {exc}")
    return findings


def thresholds_of(rule: ModuleType) -> list[str]:
    """The Config fields a rule reads (``config.<name>`` in its source), in Config's order: what ``--set`` changes
    for it and what ``explain`` shows."""
    from ..config import Config

    used = set(re.findall(r"\bconfig\.([a-z_0-9]+)", inspect.getsource(rule)))
    return [f.name for f in fields(Config) if f.name in used]
