"""The terminal report fits the terminal: at 80, 100 and 120 columns, for every real fixture (and the public traces
when present), no line is longer than the width, the waterfall's bars scale to it, each fix is printed as the same
code (never wrapped mid-token), and no evidence value is cut. The command line takes its width from ``--width``,
else ``$COLUMNS``, else the terminal, else 120."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

import pytest
from rich.cells import cell_len

from traceinspect.render import safe, sections, waterfall
from traceinspect.render.text import render_text
from traceinspect.report.doc import from_dict

from fixture_reports import FOLDERS, ROOT, folder_id, report

WIDTHS = (80, 100, 120)
BIG = ROOT / "fixtures" / "gpu" / "big_baseline"


def fix_blocks(text: str) -> list[list[str]]:
    """The printed fixes: the lines under each ``  fix:``, 4 columns in, their indentation taken off."""
    out, cur = [], None
    for line in text.splitlines():
        if line == "  fix:":
            cur = []
            out.append(cur)
        elif cur is not None and line.startswith("    "):
            cur.append(line[4:])
        else:
            cur = None
    return out


def same_code(printed: list[str], fix: list[str]) -> bool:
    """The printed lines hold the fix's code: the same Python, where the fix parses; the same characters in the same
    order (white space and comment marks aside) always."""
    squeeze = lambda lines: re.sub(r"[\s#]", "", "".join(lines))  # noqa: E731
    if squeeze(printed) != squeeze(fix):
        return False
    try:
        want = ast.dump(ast.parse("\n".join(fix)))
    except SyntaxError:
        return True
    return ast.dump(ast.parse("\n".join(printed))) == want


@pytest.mark.slow  # a sweep over every trace at hand
@pytest.mark.parametrize("folder", FOLDERS, ids=folder_id)
def test_report_fits_80_100_120_columns(folder):
    d = report(folder)
    doc = from_dict(d)
    w = waterfall.rows(doc)
    for width in WIDTHS:
        text = render_text(d, width=width)
        long = [x for x in text.splitlines() if cell_len(x) > width]
        assert not long, (width, long[:3])
        blocks = fix_blocks(text)
        assert len(blocks) == len(d["findings"])
        for f, printed in zip(doc.findings, blocks):
            assert same_code(printed, sections.fix_lines(f)), (width, f.id, printed)
        squeezed = "".join(text.split())
        for f in doc.findings:  # every evidence value shown whole (a name over NAME_WIDTH is shortened, and said)
            for line in sections.evidence_lines(f, limit=12, items=2):
                assert "".join(line.split()) in squeezed, (width, f.id, line[:120])
        assert ("ends a name or value shortened here" in text) == (safe.ELLIPSIS in text.replace(
            f"({safe.ELLIPSIS} ends a name", ""))
        if w and w.claims:
            bars = [x for x in text.splitlines() if waterfall.BAR in x]
            full = bars[0].count(waterfall.BAR)
            assert 12 <= full <= 40 and (full == 40 or width < 120 or len(w.claims) == 0)
            for line, c in zip(bars[1:], w.claims):  # to scale, whatever the width
                assert line.count(waterfall.BAR) == pytest.approx(full * c.us / w.step_us, abs=1.01)


def test_narrow_waterfall_puts_labels_on_their_own_lines():
    w = waterfall.rows(from_dict(report(BIG)))
    lines = waterfall.bar_lines(w, columns=38)
    assert all(len(x) <= 38 for x in lines if waterfall.BAR in x)
    assert lines[0] == "measured step" and lines[1].count(waterfall.BAR) == 24
    assert "- no-mixed-precision after dataloader-stall" in lines
    text = render_text(report(BIG), width=40)  # the narrowest --width: the labels wrapped, the bars whole
    assert max(cell_len(x) for x in text.splitlines() if not x.startswith("    ")) <= 40


def test_big_baseline_at_80_columns():
    """What the first look at 80 columns showed: the bars no longer wrap, the fix code is whole Python, the loader
    settings are not cut (``pin memory no, p …``), the step table is split rather than its cells cut."""
    text = render_text(report(BIG), width=80)
    assert "pin memory no, prefetch factor 2" in " ".join(text.split())
    assert "72.…" not in text and "107…" not in text
    tables = [x for x in text.splitlines() if x.startswith("step ")]
    assert len(tables) == 2 and "AR MB" in tables[1]  # two groups of columns, the step column in each
    assert "                        pin_memory=True)" in text.splitlines()  # continued under its bracket


def run_report(*args, columns=None):
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    if columns:
        env["COLUMNS"] = str(columns)
    return subprocess.run([sys.executable, "-m", "traceinspect", "report", str(BIG), *args], capture_output=True,
                          text=True, env=env, timeout=300)


def widest(out: str) -> int:
    return max(cell_len(x) for x in out.splitlines())


def test_cli_takes_its_width_from_columns_then_width():
    assert widest(run_report(columns=80).stdout) == 80
    assert 80 < widest(run_report("--width", "100", columns=80).stdout) <= 100  # --width wins
    assert widest(run_report().stdout) == 120  # a pipe, no COLUMNS: 120
    for bad in ("39", "1001"):
        p = run_report("--width", bad)
        assert p.returncode == 2 and "Traceback" not in p.stderr and "--width" in p.stderr
