"""Helpers for the rule tests: report a folder of real traces, read its raw events independently."""

from __future__ import annotations

from analyses import stages_doc_of, stages_of
from reference import union_us  # noqa: F401  (re-exported for the tests here)

import copy
import gzip
import json
import re
from pathlib import Path

from traceinspect.config import Config
from traceinspect.diagnose.engine import finish

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "fixtures" / "gpu"
PAIRS = ROOT / "fixtures" / "gpu_pairs"
CFG = Config(use_cache=False, workers=1)


def report(folder: Path) -> dict:
    """The report of a folder as its JSON document, analyzed once per session (a copy of its own)."""
    return stages_doc_of(folder)


def analysis(folder: Path):
    """The live report of a folder (findings as ``Finding``, ranks as ``RankAnalysis``), analyzed once per test
    session (analyses.stages_of): read it, do not change it."""
    return stages_of(folder)


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




def raw_one(folder: Path) -> dict:
    """The one gzipped trace file of a single-rank folder, parsed with the standard library."""
    (path,) = sorted(Path(folder).glob("*.json.gz"))
    with gzip.open(path, "rt") as f:
        return json.load(f)


def launched_in(ev: list, step: dict) -> set:
    """Correlation ids of the runtime calls made inside a ProfilerStep annotation."""
    a, b = step["ts"], step["ts"] + step["dur"]
    return {e["args"]["correlation"] for e in ev
            if e.get("cat") in ("cuda_runtime", "cuda_driver") and a <= e["ts"] < b and "correlation" in e["args"]}


def finding(rep, rule_id: str):
    """The one finding of ``rule_id`` in a live analysis, or None (never two)."""
    found = [f for f in rep.findings if f.id == rule_id]
    assert len(found) <= 1
    return found[0] if found else None


def rerun(rep, edit):
    """CONSTRUCTED: the rules again, over a copy of the real per-rank analyses after ``edit(ra)`` (which edits a
    table in place or returns the changed record)."""
    ranks = [edit(ra) or ra for ra in copy.deepcopy(rep.ranks)]
    return finish(rep.source, ranks, rep.skipped, rep.world_size, CFG)
