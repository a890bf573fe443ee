"""Every real trace folder the tests can reach: each folder under ``fixtures/`` that holds a trace file itself, and
the public traces in ``../shared`` when present; their reports, made once per test session (through the session's
cache folder, ``conftest.py``)."""

from __future__ import annotations

import functools
from pathlib import Path

import traceinspect
from traceinspect.config import Config

from sweeps import FOLDERS, ROOT, folder_id, trace_folders  # noqa: F401  (one listing of the folders)


@functools.lru_cache(maxsize=None)
def report(folder: Path) -> dict:
    return traceinspect.report_folder(str(folder), Config(workers=1)).to_dict()
