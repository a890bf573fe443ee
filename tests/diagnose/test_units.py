"""Every rule's evidence declares its units (diagnose/units.py): each number of every registered rule's evidence
record, nested records, lists and mappings included, carries a unit, so that no renderer has to guess it from the
field's name. A new rule whose record leaves a number undeclared fails here."""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any

import msgspec
import pytest

from traceinspect.diagnose import all_rules
from traceinspect.diagnose.units import UNITS, Count, Us, _unit

# Numbers that name something rather than measure it: the rank, its steps, a pipeline stage, the device's compute
# capability. Shown as they are; a unit would not fit them.
NAMES = {"rank", "steps", "stage", "compute_capability"}
# The capture's record of the workload's own DataLoader arguments, kept as it was written (open by nature).
OPEN = {"dataloader_settings"}


def undeclared(hint, where: str) -> list[str]:
    """Where ``hint`` holds a number (or a value of unknown type, which may be one) that declares no unit."""
    if typing.get_origin(hint) is Annotated:
        unit = _unit(hint)
        if unit is not None:
            assert unit in UNITS, f"{where}: unknown unit {unit}"
            return []
        hint = typing.get_args(hint)[0]
    if hint is bool or hint is str or hint is type(None) or hint is msgspec.UnsetType:
        return []
    if hint in (int, float, Any, dict, list, object):
        return [where]
    if isinstance(hint, type) and issubclass(hint, msgspec.Struct):
        skip = set(getattr(hint, "FIX_ONLY", ())) | NAMES | OPEN  # FIX_ONLY fields are not in the JSON evidence
        hints = typing.get_type_hints(hint, include_extras=True)
        return [bad for field in hint.__struct_fields__ if field not in skip
                for bad in undeclared(hints[field], f"{where}.{field}")]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is dict:
        return undeclared(args[1], f"{where}[]") if args else [where]
    if origin in (list, tuple, typing.Union, types.UnionType):
        return [bad for arg in args for bad in undeclared(arg, where)] if args else [where]
    return [f"{where} ({hint!r})"]


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.id)
def test_every_number_of_the_evidence_declares_its_unit(rule):
    assert undeclared(rule.evidence, rule.evidence.__name__) == [], \
        f"{rule.id}: declare these fields' units (diagnose/units.py)"


class _Inner(msgspec.Struct):
    copies: int
    idle_us: Us


class _Record(msgspec.Struct):
    rank: int  # a name, not a measure
    calls: Count
    wait_us: float | None
    per_op: dict[str, float]
    inner: list[_Inner]
    settings: dict
    label: str


def test_the_check_finds_an_undeclared_number():
    assert undeclared(_Record, "Record") == ["Record.wait_us", "Record.per_op[]", "Record.inner.copies",
                                              "Record.settings"]
