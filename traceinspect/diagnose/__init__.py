"""The rules: one module each, a stable id, the module docstring is the rule's documentation.

A rule module declares itself in one ``RULE = Rule(...)`` (_rule.py: its stable id, title, needs, claim, verdict
label, settings, evidence type, fix and ``check(report, config) -> list[Finding]``, ``config`` the
``Thresholds``: the only settings the diagnose stage is handed). ``check`` reads only the analyzed report (per-rank
step tables and summaries), never raw events, so rules run the same whether ranks were analyzed locally or on a
cluster. A rule module that cannot be imported, declares no rule, or whose needs a rank does not meet, is an error
in the report (``errors``), never a silent skip; the other rules still run. Adding a rule is one module and one
line in ``RULE_MODULES``.
"""

from __future__ import annotations

import importlib

from ._rule import Needs, Rule, declared

__all__ = ["RULE_MODULES", "Needs", "Rule", "load_rules", "all_rules", "get_rule", "doc_of", "missing_needs",
           "run_rules", "thresholds_of"]

# Order = the order findings are listed in when severities tie.
RULE_MODULES = (
    "pageable_memcpy",
    "dataloader_stall",
    "host_sync",
    "gpu_idle",
    "small_buckets",
    "sync_every_microstep",
    "fsdp_reducescatter",
    "fsdp_allgather",
    "exposed_comm",
    "straggler",
    "pipeline_bubble",
    "tp_exposed_comm",
    "no_mixed_precision",
    "gradscaler_with_bf16",
    "launch_bound",
    "uncaptured_launches",
    "optimizer_not_fused",
    "tensor_core_alignment",
    "memory_near_full",
    "memory_growth",
    "allocator_slack",
    "ddp_gradient_copies",
    "memory_headroom",
)


def load_rules() -> tuple[list[Rule], list[str]]:
    """(rule declarations in listing order, one error line per rule module that cannot be imported or declares no
    rule)."""
    out, errors = [], []
    for name in RULE_MODULES:
        try:
            out.append(declared(importlib.import_module(f"{__name__}.{name}")))
        except Exception as exc:  # a broken rule module must not take the other rules down
            errors.append(f"rule module {name} cannot be loaded: {type(exc).__name__}: {exc}")
    return out, errors


def all_rules() -> list[Rule]:
    """Rule declarations that load, in listing order (``load_rules`` also says which do not)."""
    return load_rules()[0]


def get_rule(rule_id: str) -> Rule | None:
    for mod in all_rules():
        if mod.ID == rule_id:
            return mod
    return None


def doc_of(rule: Rule) -> str:
    return rule.doc


def missing_needs(rule: Rule, report) -> list[str]:
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


def run_rules(report, thresholds) -> list:
    """Every rule on ``report`` with the ``Thresholds``; a rule with unmet needs or that raises adds a line to
    ``report.errors``."""
    rules, errors = load_rules()
    report.errors.extend(errors)
    findings = []
    kinds = tuple(getattr(getattr(report, "strategy", None), "kinds", ()) or ())
    for rule in rules:
        if not rule.applies_to(kinds):
            continue
        unmet = missing_needs(rule, report)
        if unmet:
            report.errors.extend(unmet)
            continue
        try:
            findings.extend(rule.check(report, thresholds))
        except Exception as exc:  # a broken rule must not take the report down with it
            report.errors.append(f"rule {rule.ID} failed: {type(exc).__name__}: {exc}")
    return findings


def thresholds_of(rule: Rule) -> list[str]:
    """The settings a rule declares it reads (its detection's, then its claim's): what ``--set`` changes for it
    and what ``explain`` shows."""
    return list(rule.thresholds)
