"""Analyses of committed trace folders (fixtures/, ../shared), made once per test session and shared by every test
module that reads the same folder with the same settings (``Config(use_cache=False, workers=1)``), through
``analyze_path`` or through the stages alone (``analyze(load(folder))``). The live report is shared: read it, do not
change it (copy it first, as the ``rerun`` helpers do); the JSON document is handed out as a copy."""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path

from traceinspect.config import Config
from traceinspect.load.reader import load
from traceinspect.run.api import analyze_path
from traceinspect.run.stages import analyze

NOCACHE = Config(use_cache=False, workers=1)


@lru_cache(maxsize=None)
def _analysis(folder: str):
    return analyze_path(folder, NOCACHE)


@lru_cache(maxsize=None)
def _doc(folder: str) -> dict:
    return _analysis(folder).to_dict()


def analysis_of(folder: str | Path):
    """The live report (``Report``) of a folder: read it, do not change it."""
    return _analysis(str(Path(folder).resolve()))


def doc_of(folder: str | Path) -> dict:
    """The report of a folder as its JSON document (``Report.to_dict()``), a copy of its own."""
    return copy.deepcopy(_doc(str(Path(folder).resolve())))


@lru_cache(maxsize=None)
def _stages(folder: str):
    return analyze(load(folder, NOCACHE), NOCACHE)


def stages_of(folder: str | Path):
    """The live report of a folder through the stages alone (``analyze(load(folder))``, no run selection): read it,
    do not change it."""
    return _stages(str(Path(folder).resolve()))


@lru_cache(maxsize=None)
def _stages_doc(folder: str) -> dict:
    return _stages(folder).to_dict()


def stages_doc_of(folder: str | Path) -> dict:
    """``stages_of(folder).to_dict()``, a copy of its own."""
    return copy.deepcopy(_stages_doc(str(Path(folder).resolve())))
