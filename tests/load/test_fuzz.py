"""Real traces with values broken at random (still valid JSON), and truncated: a report or one line per file."""

from __future__ import annotations

import gzip
import json
import random
import shutil

import pytest

from traceinspect.config import Config
from traceinspect.errors import NoUsableTraceError
from traceinspect.run.api import analyze_path

from load_helpers import PAIRS
from public_traces import PUBLIC, need, only_file

pytestmark = pytest.mark.slow  # thousands of broken variants of real traces

NOCACHE = Config(use_cache=False, workers=1)
MI250 = PUBLIC / "hta_mi250_rocm"
ODD_VALUES = ["NaN", "", "x", -1, 0, 1.5, 2**70, -(2**70), True, None, [], [1, "a"], {}, {"id": "0"}, 1e308]
META_KEYS = ["baseTimeNanoseconds", "deviceProperties", "distributedInfo", "traceinspect", "schemaVersion",
             "displayTimeUnit", "traceName"]
EVENT_KEYS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args"]
ARG_KEYS = ["correlation", "External id", "stream", "bytes", "Collective name", "Input Dims", "Seq", "Group size"]


def _break(raw: dict, rng: random.Random) -> str:
    """Replace a few values of the trace (metadata, nested metadata, events, event args) by values of other types."""
    for _ in range(rng.randint(1, 4)):
        where = rng.random()
        v = rng.choice(ODD_VALUES)
        if where < 0.35:
            raw[rng.choice(META_KEYS)] = v
        elif where < 0.5:
            for key in ("distributedInfo", "deviceProperties", "traceinspect"):
                d = raw.get(key)
                if isinstance(d, dict):
                    d[rng.choice(["rank", "world_size", "backend", "pg_config", "nccl_version", "dataloader", "ddp",
                                  "workload", "amp_dtype", "grad_scaler"])] = v
                elif isinstance(d, list) and d and isinstance(d[0], dict):
                    d[0][rng.choice(["id", "name", "computeMajor", "computeMinor"])] = v
        else:
            ev = rng.choice(raw["traceEvents"])
            if not isinstance(ev, dict):
                continue
            if where < 0.8:
                ev[rng.choice(EVENT_KEYS)] = v
            elif isinstance(ev.get("args"), dict):
                ev["args"][rng.choice(ARG_KEYS)] = v
            else:
                raw["traceEvents"][raw["traceEvents"].index(ev)] = v  # an event that is not an object
    return json.dumps(raw, indent=rng.choice([None, 1, 2]))


def _check(folder, name, strict_errors=False):
    try:
        d = analyze_path(folder, NOCACHE).to_dict()
    except NoUsableTraceError as exc:
        msg = str(exc)
        assert name in msg and "\n" not in msg
        return None
    for s in d["skipped"]:
        assert "\n" not in s["reason"]
    json.dumps(d)  # the report is JSON
    if strict_errors:  # a broken metadata value is read as absent: no analysis or rule fails on it
        assert d["errors"] == [], d["errors"]
    return d


@pytest.mark.timeout(300)
def test_broken_values_never_crash(tmp_path):
    need(MI250)
    base = json.loads(gzip.decompress(only_file(MI250).read_bytes()))
    rng = random.Random(15)
    reports = 0
    for i in range(120):
        folder = tmp_path / f"c{i}"
        folder.mkdir()
        (folder / "rank0.json").write_text(_break(json.loads(json.dumps(base)), rng))
        reports += _check(folder, "rank0.json", strict_errors=True) is not None
    assert reports > 60  # most broken copies still give a report


@pytest.mark.timeout(300)
def test_broken_gpu_fixture_never_crashes(tmp_path):
    base = json.loads(gzip.decompress(sorted((PAIRS / "two_windows").glob("*.gz"))[0].read_bytes()))
    rng = random.Random(7)
    for i in range(16):
        folder = tmp_path / f"c{i}"
        folder.mkdir()
        (folder / "rank0.json").write_text(_break(json.loads(json.dumps(base)), rng))
        _check(folder, "rank0.json", strict_errors=True)


def test_truncated_anywhere_is_one_line_and_the_rest_reports(tmp_path):
    src = sorted((PAIRS / "two_windows").glob("*.gz"))
    text = gzip.decompress(src[0].read_bytes())
    rng = random.Random(3)
    for i in range(6):
        folder = tmp_path / f"t{i}"
        folder.mkdir()
        shutil.copy(src[1], folder / src[1].name)
        cut = rng.randrange(1, len(text) - 1)
        (folder / "broken.json").write_bytes(text[:cut])
        (folder / "broken2.json.gz").write_bytes(src[0].read_bytes()[: rng.randrange(10, src[0].stat().st_size)])
        d = _check(folder, "broken")
        assert d is not None and len(d["ranks"]) == 1
        assert {s["file"].rsplit("/", 1)[-1] for s in d["skipped"]} == {"broken.json", "broken2.json.gz"}
