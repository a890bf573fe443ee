"""Discovery hides nothing without a word: a CACHEDIR.TAG that is not ours hides no rank, our own cache's version
folders are passed over and listed in ``skipped``, and a sub-folder that cannot be read is one line naming it (an
error with --strict). Folders are built here from real fixtures."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from traceinspect.cli.main import main
from traceinspect.load.discover import OUR_TAG, list_traces
from traceinspect.run import cache_store

ROOT = Path(__file__).resolve().parents[2]
A = ROOT / "fixtures" / "gpu" / "big_optimized"
B = ROOT / "fixtures" / "gpu" / "big_baseline"


def two_folders(top: Path) -> tuple[Path, Path]:
    """``top/a`` and ``top/b``, each with one real rank file (the runs differ, so both are listed)."""
    for name, src in (("a", A), ("b", B)):
        (top / name).mkdir(parents=True)
        for f in src.glob("*.json.gz"):
            shutil.copy(f, top / name / f.name)
    return top / "a", top / "b"


def test_the_tag_of_the_cache_and_of_discovery_are_one():
    assert OUR_TAG == cache_store.TAG


@pytest.mark.parametrize("tag", ["another tool's", "ours, through a link"])
def test_a_stray_cachedir_tag_hides_no_rank(tmp_path, tag):
    a, b = two_folders(tmp_path / "t")
    if tag == "another tool's":
        (b / "CACHEDIR.TAG").write_bytes(b"Signature: 8a477f597d28d172789f06886806bc55\n# some other tool\n")
    else:
        (tmp_path / "tag").write_bytes(OUR_TAG)
        (b / "CACHEDIR.TAG").symlink_to(tmp_path / "tag")
    listing = list_traces(tmp_path / "t")
    assert list(listing.files) == sorted([*a.iterdir(), *b.glob("*.json.gz")])
    assert listing.passed_over == ()


def test_our_cache_inside_a_trace_folder_is_passed_over_and_listed(tmp_path):
    """A cache folder of ours left in a trace folder (by an older version, or --cache-dir of another report): its
    entries are not read as traces and the report lists the folder in ``skipped``; files beside the tag are read."""
    a, b = two_folders(tmp_path / "t")
    assert main(["report", str(a), "-q", "--workers", "1", "--cache-dir", str(b)]) == 0  # b is not empty: refused
    assert not (b / "CACHEDIR.TAG").exists()
    (b / "CACHEDIR.TAG").write_bytes(OUR_TAG)
    (b / "v4").mkdir()
    (b / "v4" / "report-0123.json").write_text("{}")
    out = tmp_path / "r.json"
    assert main(["report", str(tmp_path / "t"), "-q", "--workers", "1", "--no-cache", "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    files = {f for r in d["runs"]["runs"] for p in r["processes"] for f in p["files"]}
    assert files == {str(p) for p in [*a.iterdir(), *b.glob("*.json.gz")]}
    assert {"file": str(b / "v4"), "reason": "traceinspect's cache folder, not traces"} in d["skipped"]


def _as_other_user(args: list[str], cwd: str) -> subprocess.CompletedProcess:
    """Run the CLI where permissions hold: as root, without the two capabilities that let root read any folder
    (still root, so the checkout and its environment stay readable wherever they are)."""
    cmd = [sys.executable, "-m", "traceinspect", *args]
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("needs setpriv to drop root's read-any-folder capabilities")
        caps = "-dac_override,-dac_read_search"
        cmd = ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}", *cmd]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=600)


@pytest.mark.slow
def test_an_unreadable_sub_folder_is_one_line_and_fatal_with_strict():
    top = Path(tempfile.mkdtemp(prefix="traceinspect-test-"))  # outside the tests' private temp folder
    try:
        top.chmod(0o755)
        a, b = two_folders(top / "t")
        for p in (top / "t", a, b, *a.iterdir(), *b.iterdir()):
            p.chmod(0o755 if p.is_dir() else 0o644)
        b.chmod(0)
        out = top / "out"
        out.mkdir()
        out.chmod(0o777)
        run = _as_other_user(["report", str(top / "t"), "--no-cache", "--workers", "1", "-q",
                              "--json", str(out / "r.json")], str(top))
        assert run.returncode == 0, run.stderr
        assert run.stderr.splitlines() == [f"traceinspect: skipped {b}: folder cannot be read (Permission denied)"]
        skipped = json.loads((out / "r.json").read_text())["skipped"]
        assert skipped == [{"file": str(b), "reason": "folder cannot be read (Permission denied)"}]
        strict = _as_other_user(["report", str(top / "t"), "--no-cache", "--workers", "1", "-q", "--strict"], str(top))
        assert strict.returncode == 2
        assert str(b) in strict.stderr and "--strict" in strict.stderr
    finally:
        if (top / "t" / "b").exists():
            (top / "t" / "b").chmod(0o755)
        shutil.rmtree(top)
