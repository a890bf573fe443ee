"""A saved report.json re-renders everything: ``traceinspect render report.json --html --out`` writes the same
HTML page, the same PNG bytes, the same Markdown and the same terminal text as the run that wrote the JSON."""

from __future__ import annotations

from pathlib import Path

import pytest

from traceinspect.cli.main import main

from public_traces import DDP_2RANK, need

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "gpu" / "big_baseline"


@pytest.mark.parametrize("folder", [pytest.param(FIXTURE, marks=pytest.mark.slow), DDP_2RANK],  # the big one: slow
                         ids=lambda p: p.name)
def test_render_from_saved_json_equals_the_live_run(folder, tmp_path, capsys):
    need(folder)
    live, saved = tmp_path / "live", tmp_path / "saved"
    assert main(["report", str(folder), "--no-cache", "--workers", "1", "--width", "120",
                 "--out", str(live), "--html", str(tmp_path / "live.html")]) == 0
    live_text = capsys.readouterr().out
    assert main(["render", str(live / "report.json"), "--width", "120", "--out", str(saved),
                 "--html", str(tmp_path / "saved.html")]) == 0
    saved_text = capsys.readouterr().out
    assert (tmp_path / "saved.html").read_bytes() == (tmp_path / "live.html").read_bytes()
    pngs = sorted(p.name for p in live.glob("*.png"))
    assert {"timeline.png", "step_breakdown.png", "message_sizes.png", "waterfall.png"} <= set(pngs)
    assert sorted(p.name for p in saved.glob("*.png")) == pngs
    for name in pngs:  # the timeline and the message sizes too: they are in the document now
        assert (saved / name).read_bytes() == (live / name).read_bytes(), name
    assert (saved / "report.md").read_text() == (live / "report.md").read_text()
    assert saved_text == live_text and "Verdict:" in saved_text


def test_render_bad_input_is_one_line(tmp_path, capsys):
    bad = tmp_path / "r.json"
    bad.write_text('{"traceEvents": []}')
    assert main(["render", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a traceinspect report" in err and str(bad) in err
    assert main(["render", str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_outputs_into_a_missing_folder_are_one_line_and_make_nothing(tmp_path, capsys):
    need(FIXTURE)
    target = tmp_path / "nonexistent" / "dir" / "r.json"
    assert main(["report", str(FIXTURE), "--no-cache", "--json", str(target), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err and "Traceback" not in err
    assert not (tmp_path / "nonexistent").exists()
