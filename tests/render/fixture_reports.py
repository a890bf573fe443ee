"""Every real trace folder the tests can reach: each folder under ``fixtures/`` that holds a trace file itself, and
the public traces in ``../shared`` when present; their reports, made once per test session (through the session's
cache folder, ``conftest.py``)."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import traceinspect
from traceinspect.config import Config

from public_traces import PUBLIC

ROOT = Path(__file__).resolve().parents[2]
TRACE = re.compile(r"\.(pt\.trace\.json|json)(\.gz)?$")


def trace_folders(root: Path) -> list[Path]:
    """Every folder under ``root`` that holds a trace file itself."""
    return sorted({p.parent for p in root.rglob("*") if TRACE.search(p.name) and p.is_file()})


FOLDERS = trace_folders(ROOT / "fixtures") + (trace_folders(PUBLIC) if PUBLIC.exists() else [])


def folder_id(p: Path) -> str:
    return str(p.relative_to(p.parents[1]))


@functools.lru_cache(maxsize=None)
def report(folder: Path) -> dict:
    return traceinspect.report_folder(str(folder), Config(workers=1)).to_dict()
