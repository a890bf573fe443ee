"""A name read from a trace never becomes code in a fix: it appears quoted, on one line, at most 80 characters,
inside a comment. Hostile input built at test time from a real H200 capture (fixtures/gpu_pairs/big_item)."""

from __future__ import annotations

import gzip
import json
import re

import pytest

from traceinspect.cli.main import main
from traceinspect.diagnose._util import NAME_LIMIT, quoted

from _real import PAIRS

PAYLOAD = 'import os; os.system("x")'
HOSTILE = f'evil\n{PAYLOAD}\r\n\x1b[2J\x1b]8;;http://x\x07\u2028' + "A" * 200
ESCAPES = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u2028\u2029]")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """big_item with its syncing op (``aten::_local_scalar_dense``, the ``.item()``) renamed to a name holding a
    newline, a line of Python, a carriage return, terminal escapes (clear screen, an OSC-8 link) and 200 more
    characters: host-sync then names that op in its fix."""
    (src,) = sorted(PAIRS.joinpath("big_item").glob("*.json.gz"))
    with gzip.open(src, "rt") as f:
        d = json.load(f)
    renamed = 0
    for e in d["traceEvents"]:
        if e.get("name") == "aten::_local_scalar_dense":
            e["name"] = HOSTILE
            renamed += 1
    assert renamed
    out = tmp_path_factory.mktemp("hostile")
    folder = out / "big_item_hostile"
    folder.mkdir()
    with gzip.open(folder / src.name, "wt") as f:
        json.dump(d, f)
    return folder


def _fix_block(rendering: str, fix: str) -> list[str]:
    """The rendered lines of the fix: from its first line, as many lines as the fix has (the renderers indent it
    or fence it, they do not reflow code)."""
    lines = rendering.splitlines()
    first = fix.splitlines()[0]
    (i,) = [k for k, ln in enumerate(lines) if ln.strip() == first.strip()]
    return lines[i:i + len(fix.splitlines())]


def test_a_hostile_op_name_is_quoted_in_the_fix_never_code(hostile, tmp_path, capsys):
    js, md = tmp_path / "r.json", tmp_path / "r.md"
    assert main(["report", str(hostile), "--json", str(js), "--markdown", str(md), "--no-cache", "--width", "120"]) in (0, 1)
    text = capsys.readouterr().out
    (f,) = [f for f in json.loads(js.read_text())["findings"] if f["id"] == "host-sync"]
    assert f["evidence"]["per_rank"][0]["top_calls"][0]["op"] == HOSTILE, "the JSON evidence keeps the name whole"
    fix = f["fix"]
    head, *rest = fix.splitlines()
    assert head.startswith("# the sync comes from ") and quoted(HOSTILE) in head
    assert PAYLOAD.replace('"', "'") in head and PAYLOAD not in fix
    assert not ESCAPES.search(fix) and len(quoted(HOSTILE)) == NAME_LIMIT + 2 and "\u2026" in head
    assert all(PAYLOAD not in ln and "os.system" not in ln for ln in rest)
    assert "loss.detach()" in fix  # the rest of the fix is the project's own code
    assert not ESCAPES.search(f["title"]) and "\n" not in f["title"]
    for rendering in (text, md.read_text()):  # the fix as the text and the Markdown report show it
        shown = _fix_block(rendering, fix)
        assert [ln.strip() for ln in shown] == [ln.strip() for ln in fix.splitlines()]
        assert all(ln.lstrip().startswith("#") for ln in shown if "os.system" in ln)


def test_quoted_names_are_short_one_line_and_quoted():
    assert quoted("aten::copy_") == '"aten::copy_"'
    q = quoted('a"b\nc\td\x1b' + "x" * 500)
    assert q.startswith('"a\'b c d ') and q.endswith('\u2026"') and len(q) == NAME_LIMIT + 2
    assert not ESCAPES.search(q) and "\n" not in q
