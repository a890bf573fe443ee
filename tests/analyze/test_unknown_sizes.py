"""Unknown is null, never zero: all-reduce sizes a gloo trace does not record, and copy bytes of a CPU-only run."""

from __future__ import annotations

import re

from diagnose._real import raw_files, report
from traceinspect.render.markdown import render_markdown
from traceinspect.render.tensorboard import scalar_rows
from traceinspect.render.text import render_text
from traceinspect.report.doc import from_dict
from public_traces import DDP_2RANK, need


def _gloo_sizes_recorded(raw: dict) -> bool:
    return any(e["name"].startswith("gloo:") and "Input Dims" in (e.get("args") or {})
               for e in raw["traceEvents"] if e.get("ph") == "X")


def test_gloo_allreduce_sizes_unknown_are_null(cpu_baseline_run):
    raws = raw_files(cpu_baseline_run)
    assert not any(_gloo_sizes_recorded(r) for r in raws)  # captured without record_shapes
    d = report(cpu_baseline_run)
    for r in d["ranks"]:
        for s in r["steps"]:
            assert s["allreduce_count"] > 0
            assert s["allreduce_bytes"] is None and s["comm_bytes"] is None
            assert s["comm_unknown_size_count"] == s["comm_calls"]
            # a CPU-only run has no copies: null, not 0
            assert s["h2d_bytes"] is None and s["pageable_h2d_bytes"] is None and s["d2h_bytes"] is None
    text = render_text(d, width=160)
    # the step table's all-reduce columns: the count, then "-" for the unknown size (never 0.0)
    n = d["ranks"][0]["steps"][0]["allreduce_count"]
    assert re.search(rf"\s{n}\s+-\s*$", text, re.M), text
    assert not re.search(r"\s0\.0\s*$", text, re.M)
    assert "None" not in render_markdown(d)
    for r in from_dict(d).ranks:
        tags = {tag for _, tag, _ in scalar_rows(r)}
        assert not [t for t in tags if t.startswith("copies_mb/")]
        assert "step/wall_ms" in tags


def test_known_sizes_still_summed():
    need(DDP_2RANK)
    d = report(DDP_2RANK)
    for s in d["ranks"][0]["steps"]:
        assert s["comm_unknown_size_count"] == 0
        assert s["allreduce_bytes"] == sum(c["bytes"] for c in s["collectives"] if c["name"] == "allreduce")
        assert s["h2d_bytes"] is not None


def test_one_unknown_size_makes_the_sum_unknown_not_zero():
    """CONSTRUCTED (per-step sums only, no trace): a step whose collectives include one unrecorded size has an
    unknown byte sum (NaN -> null), a step without collectives has 0, a fully known step its exact sum."""
    import numpy as np
    import pandas as pd

    from traceinspect.analyze.collectives import _total_columns

    c = pd.DataFrame({"step": [1, 1, 2, 2], "name": ["allreduce"] * 4, "bytes": [100, -1, 100, 50],
                      "dur_us": [10.0, 10.0, 10.0, 10.0], "group_size": [2] * 4})
    c = c.assign(_b=c["bytes"].astype(float), _d=c["dur_us"], _known=(c["bytes"] >= 0).astype(float),
                 _small=True, _sd=c["dur_us"])
    out = pd.DataFrame(index=pd.Index([1, 2, 3]))
    _total_columns(out, c)
    assert np.isnan(out.loc[1, "allreduce_bytes"]) and np.isnan(out.loc[1, "comm_bytes"])
    assert out.loc[1, "comm_unknown_size_count"] == 1
    assert out.loc[2, "allreduce_bytes"] == 150 and out.loc[2, "comm_unknown_size_count"] == 0
    assert out.loc[3, "allreduce_bytes"] == 0 and out.loc[3, "allreduce_count"] == 0
