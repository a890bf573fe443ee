"""Kernels compared by name and launch shape (grid, block) on real H200 captures (fixtures/gpu_diff/): the shapes
read from the trace files, their split of each name's count per step, the GPU time per kernel of the same name and
shape in the rate table, the JSON and the pages; a trace whose shapes are not plain numbers is data."""

from __future__ import annotations

import collections
import gzip
import json
import shutil

import pytest

from gpu_diff_fixtures import FIXTURES, REPEATS, analysed, diff_of

from traceinspect.cli.diff_shapes import NOT_RECORDED, kernel_shapes
from traceinspect.render.diff_pages import render_diff_html, render_diff_markdown
from traceinspect.render.diff_work_text import render_work_rate_text


def _kernels_by_shape(name: str) -> collections.Counter:
    """(kernel name, grid, block) -> launches in the fixture's trace, read with the standard library."""
    out: collections.Counter = collections.Counter()
    for f in (FIXTURES / name).glob("*.json.gz"):
        for e in json.loads(gzip.decompress(f.read_bytes()))["traceEvents"]:
            if e.get("cat") == "kernel" and e.get("ph") == "X":
                out[(e["name"], tuple(e["args"]["grid"]), tuple(e["args"]["block"]))] += 1
    return out


def test_shapes_are_read_from_the_trace_and_split_each_names_count():
    truth = _kernels_by_shape("cpu_a")
    read = kernel_shapes([str(f) for f in (FIXTURES / "cpu_a").glob("*.json.gz")])
    flat = {(n, s): c for n, per in read.items() for s, (c, _) in per.items()}
    expect = {(n, f"grid {'x'.join(map(str, g))}, block {'x'.join(map(str, b))}"): c for (n, g, b), c in truth.items()}
    assert flat == expect
    several = [n for n, per in read.items() if len(per) > 1]
    assert several  # a name launched with more than one shape: the case the split is for
    inv = analysed("cpu_a")[1][0]
    for n in several:
        parts = {s: v for (name, s), v in inv["kernel_shapes"].items() if name == n}
        assert len(parts) == len(read[n])
        assert sum(c for c, _ in parts.values()) == pytest.approx(inv["kernels"][n][0])
        assert sum(u for _, u in parts.values()) == pytest.approx(inv["kernels"][n][1])


@pytest.mark.parametrize("job", sorted(REPEATS))
def test_repeats_launch_the_same_kernels_in_the_same_shapes_at_the_same_gpu_rate(job):
    a, b = REPEATS[job][:2]
    dd = diff_of([a], [b])
    shapes = dd["names"]["kernel_shapes"]
    assert shapes["available"] and shapes["changed_names"] == 0
    same = {r["key"]: r for r in dd["rate"]}["gpu_same_kernels_us"]
    assert same["label"] == "GPU time of the same kernels (name and shape)"
    assert abs(same["rel_change"]) < 0.01 and same["changed"] is False  # the GPU is the same; the host is not
    top = shapes["same"][0]
    assert top["shape"].startswith("grid ") and top["count"] > 0
    assert top["new_us_per_call"] == pytest.approx(
        analysed(b)[1][0]["kernel_shapes"][(top["name"], top["shape"])][1] / top["count"])


def test_the_bucket_regression_changes_shapes_of_kernels_whose_names_stay():
    """cpu_tiny: smaller buckets launch the same elementwise kernels on smaller grids."""
    dd = diff_of(["cpu_a"], ["cpu_tiny"])
    shapes = dd["names"]["kernel_shapes"]
    assert shapes["changed_names"] > dd["names"]["kernels"]["changed_names"]
    grown = [c for c in shapes["changed"] if c["new_count"] > c["base_count"]]
    assert grown and all(c["shape"].startswith("grid ") for c in grown)


def test_pages_show_the_same_kernels_by_shape_beside_the_rates():
    dd = diff_of(["gpu_fp32"], ["gpu_fp32_single"])
    md, html, text = render_diff_markdown(dd), render_diff_html(dd), render_work_rate_text(dd)
    top = dd["names"]["kernel_shapes"]["same"][0]
    assert "## GPU time per kernel of the same name and shape" in md and top["shape"] in md
    assert "GPU time per kernel of the same name and shape" in html and top["shape"] in html
    assert "GPU time of the same kernels (name and shape)" in md  # the rate row, beside the work
    assert "GPU time per kernel of the same name and shape" in text


def test_shapes_that_are_not_plain_numbers_are_not_recorded(tmp_path):
    src = next((FIXTURES / "cpu_a").glob("*.json.gz"))
    doc = json.loads(gzip.decompress(src.read_bytes()))
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    kernels[0]["args"]["grid"] = "<script>"
    kernels[1]["args"]["block"] = [1, -2, 3]
    kernels[2]["args"]["grid"] = [10 ** 30, 1, 1]
    del kernels[3]["args"]["block"]
    bad = tmp_path / src.name
    bad.write_bytes(gzip.compress(json.dumps(doc).encode()))
    read = kernel_shapes([str(bad)])
    odd = [s for per in read.values() for s in per if not s.startswith("grid ")]
    assert set(odd) == {NOT_RECORDED}
    assert sum(per.get(NOT_RECORDED, [0])[0] for per in read.values()) == 4
    garbled = tmp_path / "garbled"
    garbled.mkdir()
    shutil.copy(src, garbled / src.name)
    (garbled / src.name).write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X", "args": 3}]}'))
    assert kernel_shapes([str(garbled / src.name)]) is None  # not decodable: compared by name only
