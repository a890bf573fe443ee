"""Every real trace folder the tests can reach, for the tests that sweep them all: each folder under ``fixtures/``
that holds a trace file itself, and the public traces in ``../shared`` when present.

``sweep()`` makes them a test's parameters: the first folder of each fixture family (``fixtures/<family>/``) and every
public trace run in the fast tier, the other folders of a family in the slow tier (``pytest -m slow``), so the
default run checks each kind of trace once and ``.ci/run`` checks them all."""

from __future__ import annotations

from pathlib import Path

import pytest

from public_traces import PUBLIC

ROOT = Path(__file__).resolve().parents[1]


def trace_folders(root: Path, pattern: str = "*.pt.trace.json*") -> list[Path]:
    """Every folder under ``root`` that holds a file named like a trace (``pattern``) itself. Our captures are named
    as ``tensorboard_trace_handler`` names them, so the JSON files beside them (the captures' truth) are not
    traces; the public traces keep the names their projects gave them (any ``.json`` or ``.json.gz``)."""
    return sorted({p.parent for p in root.rglob(pattern) if p.is_file()})


FIXTURE_FOLDERS = trace_folders(ROOT / "fixtures")
PUBLIC_FOLDERS = trace_folders(PUBLIC, "*.json*") if PUBLIC.exists() else []
FOLDERS = FIXTURE_FOLDERS + PUBLIC_FOLDERS


def folder_id(p: Path) -> str:
    return f"{p.parent.name}/{p.name}"


def sweep(folders: list[Path] = FOLDERS) -> list:
    """``folders`` as parameters, one per family in the fast tier and the rest marked ``slow``."""
    first: dict[Path, Path] = {}
    out = []
    for f in folders:
        fast = f.parent == PUBLIC or first.setdefault(f.parent, f) == f
        out.append(pytest.param(f, id=folder_id(f), marks=() if fast else (pytest.mark.slow,)))
    return out
