"""Helpers for the rule tests: report a folder of real traces, read its raw events independently."""

from __future__ import annotations

from reference import union_us  # noqa: F401  (re-exported for the tests here)

import functools
import gzip
import json
import re
from pathlib import Path

from traceinspect.config import Config
from traceinspect.run.stages import analyze
from traceinspect.load.reader import load

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "fixtures" / "gpu"
PAIRS = ROOT / "fixtures" / "gpu_pairs"
CFG = Config(use_cache=False, workers=1)


def report(folder: Path) -> dict:
    return analyze(load(folder, CFG), CFG).to_dict()


@functools.lru_cache(maxsize=None)
def analysis(folder: Path):
    """The live report of a folder (findings as ``Finding``, ranks as ``RankAnalysis``), analyzed once per test
    session: read it, do not change it."""
    return analyze(load(folder, CFG), CFG)


def findings(folder: Path) -> dict:
    return {f["id"]: f for f in report(folder)["findings"]}


def raw_files(folder: Path) -> list[dict]:
    """Every trace file of a folder, parsed with the standard library (the independent reference)."""
    out = []
    for path in sorted(Path(folder).glob("*.json*")):
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt") as f:
            out.append(json.load(f))
    return out


def steps_of(ev: list) -> list[dict]:
    return sorted((e for e in ev if e.get("cat") == "user_annotation" and re.fullmatch(r"ProfilerStep#\d+", e["name"])),
                  key=lambda e: e["ts"])


