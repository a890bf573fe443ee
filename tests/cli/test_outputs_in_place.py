"""Outputs that are not files to replace, and ways a command ends: ``--json`` to a character device, to a FIFO or to
``/dev/stdout`` writes to it in place (the device stays a device, the FIFO a FIFO, its reader gets the report); a
stdout closed before the start (``>&-``) ends quietly with 0; Ctrl-C exits 130; and the probes a hostile
surrounding tries: a cache readable by others, a trace that is a link leading out of the folder, an empty
``--scheduler``. Every input is a real fixture; timeouts are hang guards only."""

from __future__ import annotations

import gzip
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from traceinspect.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "fixtures" / "gpu" / "baseline"  # one real rank, 80 KB
OTHER = ROOT / "fixtures" / "gpu" / "optimized"
HANG_GUARD_S = 120


def run_cli(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "traceinspect", *map(str, args)], capture_output=True, text=True,
                          timeout=HANG_GUARD_S, **kw)


def no_traceback(p) -> None:
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr, p.stderr


# --------------------------------------------------------------------------- outputs written in place

def test_json_to_dev_null_leaves_the_device():
    before = os.stat("/dev/null")
    p = run_cli("report", SMALL, "--no-cache", "-q", "--json", "/dev/null")
    assert p.returncode == 0, p.stderr
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev and after.st_ino == before.st_ino


@pytest.mark.slow  # a report of the largest fixture
@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node (mknod) needs root")
def test_json_to_a_device_node_of_our_own_leaves_it_a_device(tmp_path):
    node = tmp_path / "null"
    os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # the same device as /dev/null
    for flag in ("--json", "--markdown", "--html"):
        p = run_cli("report", SMALL, "--no-cache", "-q", flag, node)
        assert p.returncode == 0, p.stderr
        assert stat.S_ISCHR(os.lstat(node).st_mode), flag
    assert sorted(x.name for x in tmp_path.iterdir()) == ["null"]  # no temporary file left beside it


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
def test_json_to_a_full_device_is_one_line_exit_2():
    p = run_cli("report", SMALL, "--no-cache", "-q", "--json", "/dev/full")
    assert p.returncode == 2 and p.stderr.strip() == "traceinspect: /dev/full: cannot write (No space left on device)"
    assert stat.S_ISCHR(os.lstat("/dev/full").st_mode)


def test_json_to_a_fifo_reaches_its_reader_and_leaves_the_fifo(tmp_path):
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    got = {}

    def read():
        with open(fifo, "rb") as fh:  # blocks until the report opens it for writing
            got["data"] = fh.read()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    p = run_cli("report", SMALL, "--no-cache", "-q", "--json", fifo)
    reader.join(HANG_GUARD_S)
    assert p.returncode == 0, p.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert json.loads(got["data"])["schema"] == "traceinspect.report/1"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["report.fifo"]


@pytest.mark.skipif(not os.path.islink("/dev/stdout"), reason="no /dev/stdout link here")
def test_json_to_dev_stdout_is_stdout():
    link = os.readlink("/dev/stdout")
    p = run_cli("report", SMALL, "--no-cache", "--json", "/dev/stdout")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["schema"] == "traceinspect.report/1"  # the document alone, as with "-"
    assert os.path.islink("/dev/stdout") and os.readlink("/dev/stdout") == link
    both = run_cli("report", SMALL, "--no-cache", "--json", "/dev/stdout", "--markdown", "-")
    assert both.returncode == 2 and "stdout" in both.stderr and both.stderr.count("\n") == 1


def test_a_regular_file_is_still_replaced_whole(tmp_path):
    out = tmp_path / "r.json"
    out.write_text("old")
    inode = out.stat().st_ino
    assert main(["report", str(SMALL), "--no-cache", "-q", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["ranks"] and out.stat().st_ino != inode  # a new file, renamed over it


# --------------------------------------------------------------------------- how a command ends

def closed_stdout(*args) -> subprocess.CompletedProcess:
    """The command started with stdout closed, as ``traceinspect ... >&-`` does."""
    return subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", sys.executable, "-m", "traceinspect", *map(str, args)],
                          capture_output=True, text=True, timeout=HANG_GUARD_S)


@pytest.mark.parametrize("extra", [[], ["--json", "-"], ["--markdown", "-"], ["-q"]], ids=str)
def test_started_with_stdout_closed_ends_quietly_with_0(extra):
    p = closed_stdout("report", SMALL, "--no-cache", *extra)
    assert p.returncode == 0 and p.stderr == "", p.stderr


def test_ctrl_c_exits_130_in_one_line(tmp_path):
    """SIGINT while the report decodes (its pool of workers has started): 130, one line, no worker left."""
    from traceinspect.run.pool import cpu_count

    if cpu_count() < 2:
        pytest.skip("one core: the report runs without a pool to wait for")
    big = next((ROOT / "fixtures" / "gpu_pairs" / "deep_clean").glob("*.json.gz"))
    with gzip.open(big, "rt") as f:
        raw = json.load(f)
    # eight ranks' worth of a real 195,000-event rank: seconds of decoding on 2 cores. Each copy is renumbered (as
    # the scale benchmark's copies are): copies of one rank are passed over as one rank seen again
    raw["distributedInfo"] = {**(raw.get("distributedInfo") or {}), "rank": -123456789, "world_size": 8}
    text = json.dumps(raw)
    for r in range(8):
        with gzip.open(tmp_path / f"rank{r}.{big.name}", "wt", compresslevel=1) as f:
            f.write(text.replace('"rank": -123456789', f'"rank": {r}', 1))
    proc = subprocess.Popen([sys.executable, "-m", "traceinspect", "report", str(tmp_path), "--no-cache", "-q",
                             "--workers", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # Ctrl-C as a terminal delivers it, whatever disposition the test runner left behind
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        workers: set[int] = set()
        while not workers and proc.poll() is None and time.monotonic() < deadline:
            workers = _children(proc.pid)
            time.sleep(0.05)
        if proc.poll() is not None:
            pytest.skip("the report ended before it could be interrupted (a machine faster than this test assumes)")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=HANG_GUARD_S)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert err.strip() == "traceinspect: interrupted", err
    gone_by = time.monotonic() + 20
    while any(Path(f"/proc/{w}").exists() and _state(w) != "Z" for w in workers) and time.monotonic() < gone_by:
        time.sleep(0.1)
    assert not [w for w in workers if Path(f"/proc/{w}").exists() and _state(w) != "Z"]


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def _children(pid: int) -> set[int]:
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.add(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue
    return out


# --------------------------------------------------------------------------- hostile surroundings

def test_cache_entries_and_index_are_private(tmp_path):
    cache = tmp_path / "cache"
    old = os.umask(0o022)  # the usual umask: a file made without care would be readable by everyone
    try:
        assert main(["report", str(SMALL), "-q", "--cache-dir", str(cache), "--workers", "1"]) == 0
    finally:
        os.umask(old)
    files = [p for p in cache.rglob("*") if p.is_file()]
    assert any(p.name == "index.sqlite" for p in files) and any(p.name.startswith("report-") for p in files)
    for p in files:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    for p in [cache, *(p for p in cache.rglob("*") if p.is_dir())]:
        assert stat.S_IMODE(p.stat().st_mode) == 0o700, p


def test_a_link_leading_out_of_the_folder_is_skipped_with_its_reason(tmp_path, capsys):
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run.mkdir()
    elsewhere.mkdir()
    src = next(SMALL.glob("*.json.gz"))
    (run / src.name).write_bytes(src.read_bytes())
    outside = elsewhere / "rank1.pt.trace.json.gz"
    outside.write_bytes(next(OTHER.glob("*.json.gz")).read_bytes())
    (run / "rank1.pt.trace.json.gz").symlink_to(outside)
    out = tmp_path / "r.json"
    assert main(["report", str(run), "--no-cache", "-q", "--json", str(out)]) == 0
    d = json.loads(out.read_text())
    assert len(d["ranks"]) == 1
    [skipped] = d["skipped"]
    assert skipped["file"] == str(run / "rank1.pt.trace.json.gz")
    assert "a link leading outside the folder" in skipped["reason"] and str(outside) in skipped["reason"]
    assert "rank1.pt.trace.json.gz" in capsys.readouterr().err  # said on stderr too
    # a link inside the folder is read as the file it names
    (run / "rank1.pt.trace.json.gz").unlink()
    inner = run / "sub"
    inner.mkdir()
    (inner / "rank1.pt.trace.json.gz").write_bytes(outside.read_bytes())
    (run / "rank1.pt.trace.json.gz").symlink_to(inner / "rank1.pt.trace.json.gz")
    assert main(["report", str(run), "--no-cache", "-q", "--json", str(out)]) == 0
    assert not [s for s in json.loads(out.read_text())["skipped"] if "outside" in s["reason"]]


@pytest.mark.parametrize("empty", ["", "  "])
def test_empty_scheduler_is_one_line_exit_2(empty):
    p = run_cli("report", SMALL, "--no-cache", "-q", "--executor", "dask", "--scheduler", empty)
    assert p.returncode == 2, p.stderr
    no_traceback(p)
    assert p.stderr.count("\n") == 1 and "--scheduler" in p.stderr and "tcp://HOST:PORT" in p.stderr
