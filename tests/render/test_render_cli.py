"""The command line's words: explain as plain text, progress as plain lines off a terminal, the diff's text."""

from __future__ import annotations

import copy
import re

from traceinspect.cli.main import _progress_factory, main
from traceinspect.config import Config
from traceinspect.diagnose import all_rules
from traceinspect.render.diff_text import render_diff_text
from traceinspect.report.diff import diff_reports
from traceinspect.run.api import analyze_path

from public_traces import DIFF_CONTROL, DIFF_TEST, need


def test_explain_prints_plain_text(capsys):
    for mod in all_rules():
        assert main(["explain", mod.ID]) == 0
        out = capsys.readouterr().out
        prose = [line for line in out.splitlines() if not line.startswith("    ")]  # code blocks stay as written
        text = "\n".join(prose)
        assert "**" not in text and "``" not in text and not re.search(r"::\s*$", text, re.M), mod.ID
        assert mod.ID in out


def test_progress_off_a_terminal_is_one_line_per_stage(capsys):
    total = 100 << 20
    start, update, stop = _progress_factory(total, True)  # capsys: stderr is not a terminal
    start()
    for _ in range(4):
        update("rank0.json", total // 4, 0)
    stop()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3, lines
    assert lines[0] == "traceinspect: reading 104.9 MB of traces"
    assert lines[1].startswith("traceinspect: read 104.9 MB in ") and lines[1].endswith("; analyzing")
    assert lines[2].startswith("traceinspect: done in ")
    assert _progress_factory(1 << 20, True) == (None, None, None)  # small loads: nothing
    assert _progress_factory(total, False) == (None, None, None)  # --quiet


def test_diff_text_lines():
    need(DIFF_CONTROL)
    need(DIFF_TEST)
    a = analyze_path(str(DIFF_CONTROL), Config(use_cache=False, workers=1)).to_dict()
    b = analyze_path(str(DIFF_TEST), Config(use_cache=False, workers=1)).to_dict()
    if a["findings"]:  # constructed: the same finding one severity worse on the new side
        b = copy.deepcopy(b)
        f = copy.deepcopy(a["findings"][0])
        b["findings"] = [x for x in b["findings"] if x["id"] != f["id"]] + [
            dict(f, severity="critical" if f["severity"] != "critical" else "critical")]
        a = copy.deepcopy(a)
        a["findings"][0]["severity"] = "info"
    text = render_diff_text(diff_reports(a, b), width=120)
    assert "(+0.0 % of step)" not in text and "(-0.0 % of step)" not in text and "+0.0% of step" not in text
    for line in text.splitlines():
        m = re.match(r"\s+(gone|new|better|worse|unchanged)\b(.)", line)
        if m:
            assert m.group(2) == ":", line
    if a["findings"]:
        assert re.search(r"^\s+worse:\s", text, re.M)


def test_progress_on_a_terminal_runs(monkeypatch):
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    start, update, stop = _progress_factory(100 << 20, True)
    start()
    for _ in range(4):
        update("rank0.json", 25 << 20, 0)
    stop()


def test_render_a_report_saved_before_the_timeline(tmp_path, capsys):
    """A report.json without the timeline and the accounting fields (as an older version wrote it) still renders:
    the sections it has, without the pictures it lacks."""
    import json
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "fixtures" / "gpu" / "big_baseline"
    d = analyze_path(str(folder), Config(use_cache=False, workers=1)).to_dict()
    step = max(r["summary"]["mean_wall_us"] for r in d["ranks"]) / 1000
    d.pop("verdict")
    d.pop("strategy")  # added later than the timeline, too
    for r in d["ranks"]:
        for k in ("timeline", "step_us", "projected_step_us", "claims"):
            r.pop(k)
    saved = tmp_path / "old.json"
    saved.write_text(json.dumps(d))
    assert main(["render", str(saved), "--out", str(tmp_path / "o"), "--html", str(tmp_path / "o.html")]) == 0
    out = capsys.readouterr().out
    assert f"Verdict: step {step:.1f} ms on rank 0" in out and "Where the step could go" not in out
    assert sorted(p.name for p in (tmp_path / "o").glob("*.png")) == ["message_sizes.png", "step_breakdown.png"] + (
        ["tradeoff.png"] if any(r.get("tradeoff") for r in d["ranks"]) else [])
