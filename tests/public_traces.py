"""Where the public real traces are, and an independent stdlib reader for checking our numbers against."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

PUBLIC = Path(__file__).resolve().parents[2] / "shared" / "traces" / "public"

DDP_2RANK = PUBLIC / "hta_ddp_2rank"
DIFF_CONTROL = PUBLIC / "hta_diff_control"
DIFF_TEST = PUBLIC / "hta_diff_test"
BERT = PUBLIC / "tracelens_bert_inference"
ALL = [DDP_2RANK, DIFF_CONTROL, DIFF_TEST, BERT]


def need(folder: Path) -> Path:
    if not folder.exists():
        pytest.skip(f"public traces not present at {folder} (they live in ../shared, outside the project)")
    return folder


def raw_events(path: Path) -> dict:
    """The whole trace object via the standard library: the independent reference for tests."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def only_file(folder: Path) -> Path:
    files = sorted(folder.glob("*.json*"))
    assert len(files) == 1
    return files[0]
