"""The command line end to end: exit codes, one-line errors, the JSON contract, golden reports."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from traceinspect.cli.main import main

from public_traces import BERT, DDP_2RANK, DIFF_CONTROL, PUBLIC, need, only_file

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
UPDATE = os.environ.get("TRACEINSPECT_UPDATE_GOLDEN") == "1"


def run_cli(*args, cwd=None):
    """The installed console entry point in a subprocess: what a user sees, tracebacks included."""
    return subprocess.run([sys.executable, "-m", "traceinspect", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def test_missing_folder_is_one_line_exit_2(tmp_path):
    p = run_cli("report", tmp_path / "nope")
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
    assert p.stderr.strip().count("\n") == 0 and "nope" in p.stderr


def test_empty_folder_exit_2(tmp_path):
    p = run_cli("report", tmp_path)
    assert p.returncode == 2 and "no trace files" in p.stderr and "Traceback" not in p.stderr


def test_only_bad_files_exit_2_names_the_file(tmp_path):
    (tmp_path / "rank0.json").write_text('{"traceEvents": [\n  {"ph": "X"')
    p = run_cli("report", tmp_path)
    assert p.returncode == 2 and "rank0.json" in p.stderr and "Traceback" not in p.stderr


def test_bad_file_next_to_good_one(tmp_path):
    need(DIFF_CONTROL)
    shutil.copy(only_file(DIFF_CONTROL), tmp_path / "rank3.json.gz")
    (tmp_path / "rank1.pt.trace.json").write_text("{ not json")
    out = tmp_path / "r.json"
    p = run_cli("report", tmp_path, "--json", out)
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    assert "skipped" in p.stderr and "rank1.pt.trace.json" in p.stderr
    d = json.loads(out.read_text())
    assert [r["rank"] for r in d["ranks"]] == [3]
    assert d["skipped"][0]["file"].endswith("rank1.pt.trace.json")
    assert "1 of 8 ranks analyzed" in p.stdout
    strict = run_cli("report", tmp_path, "--strict")
    assert strict.returncode == 2 and "--strict" in strict.stderr


def test_json_contract(tmp_path):
    need(DDP_2RANK)
    out = tmp_path / "r.json"
    assert main(["report", str(DDP_2RANK), "--json", str(out), "--quiet", "--no-cache"]) == 0
    d = json.loads(out.read_text())
    assert d["schema"] == "traceinspect.report/1"
    assert set(d) >= {"schema", "source", "ranks", "findings", "skipped"}
    r = d["ranks"][0]
    assert set(r) >= {"rank", "world_size", "files", "device", "steps"}
    assert (r["rank"], r["world_size"], r["device"]) == (0, 2, "NVIDIA A100-PG509-200")
    s = r["steps"][0]
    assert set(s) >= {"step", "wall_us", "gpu_busy_us", "breakdown_us", "totals_us", "h2d_bytes",
                      "pageable_h2d_bytes", "d2h_bytes", "dataloader_us"}
    assert set(s["breakdown_us"]) >= {"compute", "comm_exposed", "h2d_exposed", "idle"}
    assert set(s["totals_us"]) >= {"compute", "comm", "h2d", "d2h", "d2d", "memset"}
    for f in d["findings"]:
        assert set(f) >= {"id", "severity", "ranks", "steps", "title", "evidence", "fix"}
        assert f["severity"] in ("info", "warning", "critical")


def test_json_to_stdout_is_pure_json():
    need(BERT)
    p = run_cli("report", BERT, "--json", "-", "--no-cache")
    assert p.returncode == 0
    assert json.loads(p.stdout)["ranks"][0]["steps"][0]["step"] == 6


def test_fail_on(tmp_path):
    need(DIFF_CONTROL)
    # The control run has warnings (host-sync, gpu-idle) but nothing critical.
    assert main(["report", str(DIFF_CONTROL), "--quiet", "--fail-on", "warning", "--no-cache"]) == 1
    assert main(["report", str(DIFF_CONTROL), "--quiet", "--fail-on", "critical", "--no-cache"]) == 0


def test_markdown(tmp_path):
    need(DIFF_CONTROL)
    md = tmp_path / "r.md"
    assert main(["report", str(DIFF_CONTROL), "--markdown", str(md), "--quiet", "--no-cache"]) == 0
    text = md.read_text()
    assert "## Findings" in text and "`host-sync`" in text and "| step | wall ms |" in text


def test_rules_and_explain():
    p = run_cli("rules")
    assert p.returncode == 0
    for rid in ("pageable-memcpy", "dataloader-stall", "host-sync", "gpu-idle"):
        assert rid in p.stdout
    e = run_cli("explain", "pageable-memcpy")
    assert e.returncode == 0 and "pin_memory=True" in e.stdout and "non_blocking=True" in e.stdout
    bad = run_cli("explain", "nope")
    assert bad.returncode == 2 and "unknown rule" in bad.stderr and "Traceback" not in bad.stderr


def _normalize(text: str, folder: Path) -> str:
    return text.replace(str(folder), "<traces>")


# Golden reports, discovered: tests/golden/<where>/<path>.txt and .json hold the text report (at width 120) and the
# JSON report of the trace folder <path> under <where>, "fixtures" (this repository's fixtures/) or "public"
# (../shared/traces/public, skipped where absent). To add a folder, create its two files empty and run the test
# with TRACEINSPECT_UPDATE_GOLDEN=1, which rewrites every golden found from the current output.
GOLDEN_ROOTS = {"fixtures": ROOT / "fixtures", "public": PUBLIC}
GOLDENS = sorted({p.relative_to(GOLDEN).with_suffix("") for p in GOLDEN.rglob("*") if p.suffix in (".txt", ".json")})


def test_goldens_are_found_and_each_names_a_known_place():
    assert GOLDENS, f"no golden reports under {GOLDEN}"
    for rel in GOLDENS:
        assert rel.parts[0] in GOLDEN_ROOTS and len(rel.parts) > 1, f"{rel}: not under {sorted(GOLDEN_ROOTS)}"


@pytest.mark.parametrize("rel", GOLDENS, ids=str)
def test_golden_text_and_json(rel, tmp_path):
    folder = GOLDEN_ROOTS[rel.parts[0]].joinpath(*rel.parts[1:])
    if rel.parts[0] == "public":
        need(folder)
    assert folder.is_dir(), f"golden {rel} names no trace folder ({folder})"
    out = tmp_path / "r.json"
    p = run_cli("report", folder, "--json", out, "--width", "120", "--no-cache")
    assert p.returncode == 0, p.stderr
    text = _normalize(p.stdout, folder)
    d = json.loads(_normalize(out.read_text(), folder))
    gt, gj = (GOLDEN / rel).with_suffix(".txt"), (GOLDEN / rel).with_suffix(".json")
    if UPDATE:
        gt.write_text(text)
        gj.write_text(json.dumps(d, indent=1, sort_keys=True))
    assert gt.exists() and gj.exists(), f"{rel}: both .txt and .json are needed (TRACEINSPECT_UPDATE_GOLDEN=1 writes them)"
    assert text == gt.read_text()
    assert d == json.loads(gj.read_text())


@pytest.mark.slow
def test_second_report_comes_from_cache_and_is_identical(tmp_path):
    need(DIFF_CONTROL)
    traces = tmp_path / "traces"
    traces.mkdir()
    shutil.copy(only_file(DIFF_CONTROL), traces / "rank3.json.gz")
    cache = tmp_path / "cache"
    first = run_cli("report", traces, "--width", "120", "--cache-dir", cache)
    assert first.returncode == 0
    assert list(cache.rglob("report-*.msgpack")) and list(cache.rglob("rank-*.json"))
    assert sorted(p.name for p in traces.iterdir()) == ["rank3.json.gz"]
    second = run_cli("report", traces, "--width", "120", "--cache-dir", cache)
    assert second.stdout == first.stdout
    nocache = run_cli("report", traces, "--width", "120", "--no-cache")
    assert nocache.stdout == first.stdout
    # A changed file invalidates the cache (size + mtime key): the skipped file shows up.
    (tmp_path / "rank0.json").write_text("{")
    third = run_cli("report", tmp_path, "--width", "120", "--cache-dir", cache)
    assert "rank0.json" in third.stdout and third.stdout != first.stdout


@pytest.mark.slow  # waits for a scheduler that never answers
def test_unreachable_dask_scheduler_is_said_then_one_line(tmp_path):
    """A scheduler address nothing listens on: the wait is announced before it starts, and it ends in one line."""
    pytest.importorskip("dask.distributed")
    folder = ROOT / "fixtures" / "gpu" / "big_baseline"
    p = run_cli("report", folder, "--executor", "dask", "--scheduler", "tcp://127.0.0.1:9", "--no-cache")
    assert p.returncode == 2
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert lines[0].startswith("traceinspect: connecting to the Dask scheduler tcp://127.0.0.1:9")
    assert "cannot reach the Dask scheduler tcp://127.0.0.1:9" in lines[-1] and "Traceback" not in p.stderr
