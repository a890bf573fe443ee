"""Every number a report shows twice is the same number, on every fixture folder and public trace: the waterfall's
bar and the finding's time at stake (its claim now, or the part after the DataLoader's fix, each named in the
finding's at-stake line), the verdict's step and projection and the waterfall's, the claims and the projection.
Text, Markdown and HTML draw these from the same helpers (``render/sections.py``, ``render/waterfall.py``) on the
JSON document, so the document and those helpers are checked. Reports are cached per test session (the analysis
cache of the session's cache folder: folders another test analysed are read back, not analysed again)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

from traceinspect.config import Config
from traceinspect.render import format as fmt, sections, waterfall
from traceinspect.run import report_folder

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = ROOT.parent / "shared" / "traces" / "public"
FOLDERS = sorted({p.parent for p in (ROOT / "fixtures").glob("**/*.json*")}) + (
    sorted({p.parent for p in PUBLIC.glob("*/*.json*")}) if PUBLIC.exists() else [])


@lru_cache(maxsize=None)
def _doc(folder: Path) -> dict:
    return report_folder(folder, Config(workers=1)).to_dict()


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))


@pytest.mark.slow  # a sweep over every trace at hand
@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_number_shown_twice_agrees(folder):
    d = _doc(folder)
    v, w = d.get("verdict"), waterfall.rows(d)
    if not v or w is None:
        return
    (r,) = [x for x in d["ranks"] if x["rank"] == v["rank"]]
    # the verdict's step and projection are the waterfall's, and the claims add up to their difference
    assert _close(v["step_us"], r["step_us"]) and _close(w["step_us"], r["step_us"])
    assert _close(v["projected_step_us"], r["projected_step_us"]) and _close(w["projected_step_us"], r["projected_step_us"])
    assert _close(sum(c["us"] for c in r["claims"]), r["step_us"] - r["projected_step_us"])
    by_id = {f["id"]: f for f in d["findings"]}
    for c in w["claims"]:
        f = by_id[c["id"]]
        line = sections.stake(f)
        if f.get("claim_rank") not in (None, r["rank"]):
            # measured on another rank: the severity names whose step it is
            assert f"rank {f['claim_rank']}'s" in (f.get("severity_reason") or ""), (c["id"], f.get("severity_reason"))
            continue
        # the bar is the finding's claim now, or its saving after the DataLoader's fix: both on its at-stake line
        shown = f["after_loader_fix"]["us"] if c.get("after") else f["time_at_stake_us"]
        assert _close(c["us"], shown), (c["id"], c["us"], shown)
        assert fmt.ms(c["us"]) in line, (c["id"], fmt.ms(c["us"]), line)
        if c.get("after"):
            assert c["after"] in line and f["after_loader_fix"]["id"] == c["after"]
    # a finding the verdict names as the largest is the waterfall's first bar not waiting for another fix
    if v.get("largest"):
        first = next(c for c in w["claims"] if not c.get("after"))
        assert v["largest"]["id"] == first["id"] and _close(v["largest"]["us"], first["us"])
