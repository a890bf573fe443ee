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
from msgspec import convert

from traceinspect.config import Config
from traceinspect.render import format as fmt, sections, waterfall
from traceinspect.report.doc import FindingDoc, from_dict
from traceinspect.run import report_folder

from sweeps import FOLDERS

ROOT = Path(__file__).resolve().parents[2]


@lru_cache(maxsize=None)
def _doc(folder: Path) -> dict:
    return report_folder(folder, Config(workers=1)).to_dict()


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))


@pytest.mark.slow  # a sweep over every trace at hand
@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_number_shown_twice_agrees(folder):
    d = _doc(folder)
    v, w = d.get("verdict"), waterfall.rows(from_dict(d))
    if not v or w is None:
        return
    (r,) = [x for x in d["ranks"] if x["rank"] == v["rank"]]
    # the verdict's step and projection are the waterfall's, and the claims add up to their difference
    assert _close(v["step_us"], r["step_us"]) and _close(w.step_us, r["step_us"])
    assert _close(v["projected_step_us"], r["projected_step_us"]) and _close(w.projected_step_us, r["projected_step_us"])
    assert _close(sum(c["us"] for c in r["claims"]), r["step_us"] - r["projected_step_us"])
    by_id = {f["id"]: f for f in d["findings"]}
    for c in w.claims:
        f = by_id[c.id]
        line = sections.stake(convert(f, FindingDoc))
        if f.get("claim_rank") not in (None, r["rank"]):
            # measured on another rank: the severity names whose step it is
            assert f"rank {f['claim_rank']}'s" in (f.get("severity_reason") or ""), (c.id, f.get("severity_reason"))
            continue
        # the bar is the finding's claim now, or its saving after the DataLoader's fix: both on its at-stake line
        shown = f["after_loader_fix"]["us"] if c.after else f["time_at_stake_us"]
        assert _close(c.us, shown), (c.id, c.us, shown)
        assert fmt.ms(c.us) in line, (c.id, fmt.ms(c.us), line)
        if c.after:
            assert c.after in line and f["after_loader_fix"]["id"] == c.after
    # a finding the verdict names as the largest is the waterfall's first bar not waiting for another fix
    if v.get("largest"):
        first = next(c for c in w.claims if not c.after)
        assert v["largest"]["id"] == first.id and _close(v["largest"]["us"], first.us)


STRATEGIES = sorted(p for p in (ROOT / "fixtures" / "cpu_strategies").glob("fsdp2_*") if p.is_dir())


@pytest.mark.parametrize("folder", STRATEGIES, ids=lambda p: p.name)
def test_a_finding_names_whose_step_each_share_is_of(folder):
    """The title and the evidence describe the rank the problem is worst on; the claim is a share of the reference
    rank's step. Where the two differ, the at-stake line names the rank and its step, which is that rank's mean."""
    d = _doc(folder)
    steps = {r["rank"]: r["step_us"] for r in d["ranks"]}
    for f in d["findings"]:
        named = ((f.get("evidence") or {}).get("per_rank") or [{}])[0]
        rank, at, share = f.get("claim_rank"), f.get("time_at_stake_us"), f.get("share_of_step")
        if not at or share is None or not isinstance(named, dict) or named.get("rank") in (None, rank):
            continue
        line = sections.stake(convert(f, FindingDoc))
        assert f"of rank {rank}'s {fmt.ms(steps[rank])} step" in line, (f["id"], line)
        assert f"rank {named['rank']}" in f["title"]  # the title's share is of the rank it names


def test_launch_share_and_claim_read_on_from_each_other():
    """big_optimized: 'GPU waits on launches 50 % of the step' beside 'at stake 0.27 ms'. The title gives the wait
    in ms and the part of it the prescribed fix removes; the at-stake line says what of that part is not claimed."""
    d = _doc(ROOT / "fixtures" / "gpu" / "big_optimized")
    f = next(f for f in d["findings"] if f["id"] == "launch-bound")
    e = f["evidence"]["per_rank"][0]
    step = next(r["step_us"] for r in d["ranks"] if r["rank"] == e["rank"])
    assert f"{100 * e['idle_launch_us_per_step'] / step:.0f} % of the step" in f["title"]
    assert f"({e['idle_launch_us_per_step'] / 1000:.2f} ms, rank {e['rank']}" in f["title"]
    part = e["idle_launch_capturable_us_per_step"]
    assert f"{part / 1000:.2f} ms of it" in f["title"]
    line = sections.stake(convert(f, FindingDoc))
    assert f"of the {fmt.ms(part)} it measures" in line and "not counted" in line, line
    lb = f["loader_bound"]["cut_us"]
    assert _close(f["time_at_stake_us"] + lb, part) or abs(f["time_at_stake_us"] + lb - part) < 1.0


def test_diff_header_and_table_name_their_captures():
    """Two base captures: the header's step is the mean of both, the table's the first capture's; each says so."""
    import re

    from traceinspect.render.diff_text import render_diff_text
    from traceinspect.report.diff_runs import diff_runs

    import statistics

    gd = ROOT / "fixtures" / "gpu_diff"
    a, b, new = (_doc(gd / n) for n in ("gpu_a", "gpu_b", "gpu_fp32"))
    text = " ".join(render_diff_text(diff_runs([a, b], [new]), width=400).split())
    means = [statistics.fmean(s["wall_us"] for s in d["ranks"][0]["steps"] if not s.get("synthetic"))
             for d in (a, b)]
    head = re.search(r"Step time \(slowest rank\): ([\d.]+) ms \(rank 0, mean of 2 captures\)", text)
    assert head and abs(float(head.group(1)) - statistics.fmean(means) / 1000) < 0.01, text[:400]
    table = re.search(r"of the first capture of each side .*? step \(wall\)\s+([\d.]+) ±", text)
    assert table and abs(float(table.group(1)) - means[0] / 1000) < 0.01
    assert "also " in text and "gpu_b" in text  # the header names the second capture too
