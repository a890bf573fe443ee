"""The terminal and Markdown show, under a finding whose title names a rank, the evidence of that rank."""

from __future__ import annotations

import re

from _real import report
from traceinspect.render.markdown import render_markdown
from traceinspect.render.text import render_text


def _named_rank(title: str):
    m = re.search(r"\brank (\d+)\b", title)
    return int(m.group(1)) if m else None


def test_evidence_shown_is_of_the_rank_the_title_names(cpu_baseline_run):
    d = report(cpu_baseline_run)
    multi = [f for f in d["findings"] if len(f["evidence"].get("per_rank") or []) > 1]
    assert multi, "the 2-rank baseline has findings on both ranks"
    text = render_text(d, width=200)
    md = render_markdown(d)
    for f in multi:
        named = _named_rank(f["title"])
        if named is None:
            continue
        assert f["evidence"]["per_rank"][0]["rank"] == named
        block = text.split(f["title"][:60], 1)[1]
        first_rank = next(ln.strip() for ln in block.splitlines() if ln.strip().startswith("rank:"))
        assert first_rank == f"rank: {named}", f["id"]
        mblock = md.split(f"### `{f['id']}`", 1)[1]
        evidence_head = next(ln for ln in mblock.splitlines() if ln.startswith("| evidence |"))
        assert evidence_head.split("|")[2].strip() == f"rank {named}", f["id"]
    # at least one finding names rank 1 (the others would pass with rank 0 first by accident)
    ranks_named = {_named_rank(f["title"]) for f in multi}
    assert len({r["rank"] for r in d["ranks"]}) == 2 and ranks_named - {None}
