"""Properties (hypothesis): layout, key order and event order do not change the report; runs never merge."""

from __future__ import annotations

import gzip
import json
import random
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from traceinspect.config import Config
from traceinspect.load.discover import list_traces
from traceinspect.load.reader import plan_folder
from traceinspect.run.api import analyze_path

from load_helpers import GPU, PAIRS, assert_same, comparable, copy_run

NOCACHE = Config(use_cache=False, workers=1)
SRC = sorted((PAIRS / "two_windows").glob("*.json.gz"))[0]
RAW = json.loads(gzip.decompress(SRC.read_bytes()))
SETTINGS = settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
                    phases=[Phase.explicit, Phase.generate])  # no shrinking: each example is a whole report


def _report(text: str) -> dict:
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "rank0.json").write_text(text, newline="")
        return comparable(analyze_path(d, NOCACHE).to_dict())


REF = None


def _ref() -> dict:
    global REF
    if REF is None:
        REF = _report(json.dumps(RAW, indent=2))
    return REF


def _reorder(x, rng: random.Random):
    if isinstance(x, dict):
        keys = list(x)
        rng.shuffle(keys)
        return {k: _reorder(x[k], rng) for k in keys}
    if isinstance(x, list):
        return [_reorder(v, rng) for v in x]
    return x


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), indent=st.sampled_from([None, 0, 1, 2, 3, "\t"]),
       crlf=st.booleans(), shuffle_events=st.booleans())
def test_layout_key_and_event_order_do_not_change_the_report(seed, indent, crlf, shuffle_events):
    rng = random.Random(seed)
    raw = _reorder(RAW, rng)
    if shuffle_events:  # sums then add in another order: equal up to float rounding
        rng.shuffle(raw["traceEvents"])
    text = json.dumps(raw, indent=indent)
    if crlf:
        text = text.replace("\n", "\r\n")
    assert_same(_report(text), _ref())


# Real single-run folders: each is one run (one rank, one or two windows).
RUN_FOLDERS = [GPU / n for n in ("baseline", "fp16", "pinned", "tf32")] + [PAIRS / n for n in (
    "small_clean", "small_clean_b", "two_windows", "small_item")]


@SETTINGS
@given(chosen=st.lists(st.sampled_from(RUN_FOLDERS), min_size=1, max_size=5, unique=True),
       flat=st.booleans())
def test_runs_copied_into_one_folder_are_told_apart(chosen, flat):
    with tempfile.TemporaryDirectory() as d:
        expected = []
        for i, src in enumerate(chosen):
            dst = Path(d) if flat else Path(d) / f"sub{i}"
            expected.append(sorted(p.name for p in copy_run(src, dst, prefix=f"{i}_")))
        plan, bad = plan_folder(list_traces(d).files)
        assert not bad and not plan.skipped
        got = sorted(sorted(Path(f).name for f in r.files) for r in plan.runs)
        assert got == sorted(expected)
        assert all(len(r.processes) == 1 for r in plan.runs)
