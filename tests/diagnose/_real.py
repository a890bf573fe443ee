"""Helpers for the rule tests: report a folder of real traces, read its raw events independently."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

from traceinspect.config import Config
from traceinspect.diagnose.engine import analyze
from traceinspect.load.reader import load

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "fixtures" / "gpu"
PAIRS = ROOT / "fixtures" / "gpu_pairs"
CFG = Config(use_cache=False, workers=1)


def report(folder: Path) -> dict:
    return analyze(load(folder, CFG), CFG).to_dict()


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


def union_us(intervals, a: float, b: float) -> float:
    """Length of the union of (start, end) intervals clipped to [a, b]."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted((max(s, a), min(e, b)) for s, e in intervals if e > a and s < b):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total
