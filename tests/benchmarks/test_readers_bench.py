"""benchmarks/readers.py on a real capture: every reader it times reads every event of the file.

The independent count is the standard library's ``json`` on the same file; the Arrow rows check that cutting
Kineto's array at its event separator yields one line per event (the reshaping the benchmark times).
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import readers  # noqa: E402

pytestmark = pytest.mark.slow  # runs the readers benchmark

FIXTURE = next((ROOT / "fixtures" / "gpu_setup" / "small_pinned").glob("*.json.gz"))


def test_every_reader_reads_every_event(tmp_path, capsys):
    with gzip.open(FIXTURE, "rt") as f:
        n = len(json.load(f)["traceEvents"])
    out = tmp_path / "readers.json"
    assert readers.main([str(FIXTURE), "--repeat", "1", "--hta-s", "2.0", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    rows = {r["reader"]: r for r in doc["rows"]}
    counted = {name: r["events"] for name, r in rows.items() if r["events"] is not None}
    assert set(counted) >= {"json", "msgspec", "msgspec typed", "arrow reshape", "arrow 1 thread"}, counted
    assert set(counted.values()) == {n}, counted
    assert doc["budget_s"] == pytest.approx(0.1)
    assert all(r["seconds"] > 0 for r in doc["rows"])
    printed = capsys.readouterr().out
    assert "20x HTA's 2 s allows 0.10 s" in printed and "python + imports" in printed
