"""A real trace whose events carry ``NaN`` times (what Python's ``json.dumps`` writes for a float NaN): the events
are dropped, counted and the file named on the page, the rest of the report runs."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

from traceinspect.config import Config
from traceinspect.render.text import render_text
from traceinspect.run import report_folder

SRC = next((Path(__file__).resolve().parents[2] / "fixtures" / "cpu" / "fetch_stub").glob("*.json.gz"))


def test_nan_times_are_dropped_counted_and_named(tmp_path):
    text = gzip.open(SRC, "rt").read()
    hits = iter(range(10**9))
    damaged = re.sub(r'"ts": ?[0-9.]+', lambda m: '"ts": NaN' if 50 <= next(hits) < 53 else m.group(0), text)
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(damaged)
    d = report_folder(str(tmp_path), Config(use_cache=False, workers=1)).to_dict()
    (r,) = d["ranks"]
    assert r["impossible_time_events"] == 3
    assert "impossible" not in str(r.get("unmodelled"))
    page = render_text(d, width=120)
    assert "skipped, 3 events whose time is NaN, infinite or negative" in page and path.name in page
    assert r["steps"], "the rest of the report runs"
