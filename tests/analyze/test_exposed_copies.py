"""A step's exposed copy time is never more than its copies' time, on every real trace (fixtures and public).

The public ``hta_diff_test`` trace copies its batches on a side stream (stream 16), launched by the next step while
the GPU still runs this step's kernels: those copies run in this step's window. They are the next step's copies
(its bytes, its time), so in this window they are idle time, not this step's exposed copies.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnose._real import analysis, raw_files, steps_of
from public_traces import PUBLIC, need
from traceinspect.config import Config
from traceinspect.run import report_folder
from sweeps import sweep

ROOT = Path(__file__).resolve().parents[2]
# Times are float microseconds since the epoch (1.7e15): sums and sweeps differ by a fraction of a microsecond.
SLACK_US = 0.5
# Through the result cache, as the other every-trace tests: a folder is analyzed once per test session.
CACHED = Config(workers=1)


@pytest.mark.parametrize("folder", sweep())
def test_exposed_copy_time_within_copy_time(folder):
    rep = report_folder(folder, CACHED).to_dict()
    for r in rep["ranks"]:
        for s in r["steps"]:
            b = s.get("breakdown_us") or {}
            for c in ("h2d", "d2h", "d2d"):
                if f"{c}_exposed" in b:
                    assert b[f"{c}_exposed"] <= s[f"{c}_time_us"] + SLACK_US, (r["rank"], s["step"], c)
                    assert s["totals_us"][c] <= s[f"{c}_time_us"] + SLACK_US, (r["rank"], s["step"], c)


def test_side_stream_prefetch_first_step():
    """hta_diff_test step 1009: 25 H2D copies launched in the step (12.9 ms, from the raw JSON), and 25 more of
    step 1010 running in its window on the side stream; the step's exposed H2D is at most its own 12.9 ms."""
    folder = need(PUBLIC / "hta_diff_test")
    (doc,) = raw_files(folder)
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    first, second = steps_of(ev)[:2]
    launched = {e["args"]["correlation"] for e in ev if e.get("cat") == "cuda_runtime" and "correlation" in e["args"]
                and first["ts"] <= e["ts"] < first["ts"] + first["dur"]}
    h2d = [e for e in ev if e.get("cat") == "gpu_memcpy" and "HtoD" in e["name"]]
    own = sum(e["dur"] for e in h2d if e["args"].get("correlation") in launched)
    (s0, *_) = analysis(folder).to_dict()["ranks"][0]["steps"]
    assert s0["step"] == int(first["name"].split("#")[1])
    assert s0["h2d_time_us"] == pytest.approx(own, abs=SLACK_US)
    # copies of the next step ran in this window (the side stream runs ahead): there is more H2D here than its own
    window = (s0["start_us"], s0["end_us"])
    nxt = [e for e in h2d if e["args"].get("correlation") not in launched and window[0] <= e["ts"] < window[1]
           and e["ts"] >= second["ts"]]
    assert sum(e["dur"] for e in nxt) > 0.5 * own
    assert s0["breakdown_us"]["h2d_exposed"] <= own + SLACK_US
