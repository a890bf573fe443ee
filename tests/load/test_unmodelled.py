"""Events of a device the tool does not model are counted and named in the report, never dropped without a word.

The hostile variants are built at test time from a real H200 capture: events of categories no analysis knows (an
MTIA DMA request, an MTIA command-processor event) are put in the middle of its ``traceEvents``, as another
device's activity would be in a trace of several devices.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import pytest

from traceinspect.config import Config
from traceinspect.load.unmodelled import MAX_NAMED, OTHER
from traceinspect.render.markdown import render_markdown
from traceinspect.render.text import render_text
from traceinspect.run import report_folder
from traceinspect.run.api import analyze_path

from public_traces import PUBLIC, need

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "fixtures" / "gpu_pairs" / "small_clean"
# What the analyses read, and what they leave out on purpose (host-side records): the independent reference.
KEPT = {"cpu_op", "operator", "user_annotation", "gpu_user_annotation", "cuda_runtime", "runtime", "cuda_driver",
        "kernel", "gpu_memcpy", "memcpy", "gpu_memset", "memset"}
HOST_ONLY = {"python_function", "overhead", "trace", "cpu_instant_event", "external_correlation", "cuda_profiler_range"}


def _raw(folder: Path) -> dict:
    (path,) = sorted(folder.glob("*.json*"))
    with (gzip.open if path.name.endswith(".gz") else open)(path, "rt") as f:
        return json.load(f)


def _unmodelled_raw(doc: dict) -> dict:
    """Independent: complete events per category that is neither read nor left out on purpose."""
    out: dict = {}
    for e in doc["traceEvents"]:
        c = e.get("cat")
        if e.get("ph") == "X" and isinstance(c, str) and c and c.lower() not in KEPT | HOST_ONLY:
            out[c] = out.get(c, 0) + 1
    return out


def _with_other_device(tmp: Path, counts: dict, gz: bool = True) -> Path:
    """The real trace with, in the middle of its events, ``counts[cat]`` copies of its kernels in category ``cat``
    (times and streams of real kernels: such events overlap the GPU's own work)."""
    doc = _raw(REAL)
    ev = doc["traceEvents"]
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    extra = []
    for cat, n in counts.items():
        for i in range(n):
            e = copy.deepcopy(kernels[i % len(kernels)])
            e["cat"] = cat
            e["name"] = f"{cat}_{i % 3}"
            extra.append(e)
    mid = len(ev) // 2
    doc["traceEvents"] = ev[:mid] + extra + ev[mid:]
    out = tmp / "run"
    out.mkdir()
    name = "rank0.1.pt.trace.json" + (".gz" if gz else "")
    with (gzip.open if gz else open)(out / name, "wt") as f:
        json.dump(doc, f, indent=1)
    return out


def _report(folder: Path, **kw) -> dict:
    return analyze_path(folder, Config(workers=1, **({"use_cache": False} | kw))).to_dict()


@pytest.fixture(scope="module")
def clean():
    return _report(REAL)


@pytest.mark.parametrize("gz", [True, False], ids=["gzip", "plain"])
def test_unknown_device_is_counted_and_named(tmp_path, clean, gz):
    counts = {"dma_request": 37, "mtia_ccp_events": 5}
    folder = _with_other_device(tmp_path, counts, gz)
    assert _unmodelled_raw(_raw(folder)) == counts
    d = _report(folder)
    (r,) = d["ranks"]
    assert r["unmodelled"] == counts
    text = render_text(d, width=160)
    (line,) = [x for x in text.splitlines() if "not modelled" in x]
    assert "dma_request 37 events" in line and "mtia_ccp_events 5 events" in line
    md = render_markdown(d)
    assert "not modelled" in md and "37 events" in md
    # and they are in no number: every step is the clean run's, to the microsecond
    for a, b in zip(r["steps"], clean["ranks"][0]["steps"], strict=True):
        assert a["kernel_count"] == b["kernel_count"]
        assert a["breakdown_us"] == pytest.approx(b["breakdown_us"], abs=1e-6)
        assert a["gpu_busy_us"] == pytest.approx(b["gpu_busy_us"], abs=1e-6)


def test_counts_survive_the_column_cache(tmp_path):
    folder = _with_other_device(tmp_path, {"dma_request": 12})
    cache = tmp_path / "cache"
    first = _report(folder, use_cache=True, cache_dir=str(cache))
    again = _report(folder, use_cache=True, cache_dir=str(cache))
    assert first["ranks"][0]["unmodelled"] == again["ranks"][0]["unmodelled"] == {"dma_request": 12}


@pytest.mark.parametrize("gz", [True, False], ids=["gzip", "plain"])
def test_counts_survive_spilling(tmp_path, gz):
    """A file past the memory bound is decoded into spill files (load/spill.py): its counts are the same."""
    counts = {"dma_request": 37, "mtia_ccp_events": 5}
    d = _report(_with_other_device(tmp_path, counts, gz), memory_limit_bytes=1 << 20)  # columns past 256 KiB spill
    assert d["ranks"][0]["unmodelled"] == counts


def test_many_unknown_categories_are_capped(tmp_path):
    """A file can hold any number of categories: the report names MAX_NAMED of them and sums the rest."""
    counts = {f"accel_{i:02d}": 40 - i for i in range(MAX_NAMED + 4)}
    d = _report(_with_other_device(tmp_path, counts))
    got = d["ranks"][0]["unmodelled"]
    assert len(got) == MAX_NAMED + 1
    assert got[OTHER] == sum(sorted(counts.values())[:4])
    assert sum(got.values()) == sum(counts.values())


def test_category_names_are_data(tmp_path):
    """A category is shown, never interpreted: control characters come out visible, not as terminal escapes."""
    d = _report(_with_other_device(tmp_path, {"dma\x1b[31m_request": 3}))
    assert d["ranks"][0]["unmodelled"] == {"dma\x1b[31m_request": 3}
    text = render_text(d, width=160)
    assert "\x1b" not in text and "dma\\x1b[31m_request 3 events" in text


@pytest.mark.slow  # a sweep over every trace at hand
def test_real_traces_have_no_unmodelled_events():
    """The public traces (and the fixtures) hold only categories read or left out on purpose: nothing is named."""
    def raw_clean(folder: Path) -> None:
        for doc in map(json.loads, map(lambda p: gzip.open(p, "rt").read(), sorted(folder.glob("*.json.gz")))):
            assert _unmodelled_raw(doc) == {}, folder

    for f in sorted({p.parent for p in (ROOT / "fixtures").rglob("*.json.gz")})[:12]:
        raw_clean(f)
    folders = sorted({p.parent for p in need(PUBLIC).glob("*/*.json.gz")})
    assert folders
    for f in folders:
        raw_clean(f)
    for f in folders:  # and the report names none (the cached reports the other every-trace tests read)
        rep = report_folder(f, Config(workers=1)).to_dict()
        assert all("unmodelled" not in r for r in rep["ranks"]), f
