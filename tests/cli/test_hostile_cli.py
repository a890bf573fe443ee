"""The command line against accidents and hostile surroundings: no hang, no orphan, an exit code that says what
happened, outputs written whole and never through a planted link. Every input is a real fixture (or a copy of one,
relabelled at test time); timeouts here are hang guards only, far above the time anything should take."""

from __future__ import annotations

import gzip
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from traceinspect.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "fixtures" / "gpu" / "baseline"  # one real rank, 80 KB
OTHER_RUN = ROOT / "fixtures" / "gpu" / "optimized"  # another real run
BIG = ROOT / "fixtures" / "gpu_pairs" / "deep_clean"  # one real rank, 195,000 events
HANG_GUARD_S = 120


def run_cli(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "traceinspect", *map(str, args)], capture_output=True, text=True,
                          timeout=HANG_GUARD_S, **kw)


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


# --------------------------------------------------------------------------- Dask: every wait bounded and named

def test_malformed_scheduler_is_one_line_exit_2(capsys):
    pytest.importorskip("dask.distributed")
    for bad in ("tcp://host:notaport", "::::", "tcp://", "localhost", "tcp://h:70000", "http://h:8786"):
        assert main(["report", str(SMALL), "--no-cache", "-q", "--executor", "dask", "--scheduler", bad]) == 2
        line = one_line(capsys.readouterr().err)
        assert repr(bad) in line and "tcp://HOST:PORT" in line


class _Http(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - a plain web server, as a dashboard port would be
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.mark.slow  # each unreachable scheduler is waited for, up to the 10 s the CLI allows
def test_scheduler_waits_are_bounded_and_named(tmp_path):
    distributed = pytest.importorskip("dask.distributed")
    from traceinspect.run.dask import SCHEDULER_TIMEOUT_S

    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Http)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    with distributed.LocalCluster(n_workers=0, processes=False, protocol="tcp", host="127.0.0.1",
                                  dashboard_address=":0") as empty:
        cases = {f"tcp://127.0.0.1:{web.server_address[1]}": "no answer",
                 f"tcp://127.0.0.1:{closed_port}": "no answer",
                 empty.scheduler_address: "has no workers"}
        # All three at once: each waits for its own deadline.
        procs = {addr: subprocess.Popen([sys.executable, "-m", "traceinspect", "report", str(SMALL), "--no-cache",
                                         "-q", "--executor", "dask", "--scheduler", addr],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for addr in cases}
        try:
            results = {addr: p.communicate(timeout=HANG_GUARD_S) for addr, p in procs.items()}
        finally:
            for p in procs.values():
                p.kill()
    web.shutdown()
    for addr, expected in cases.items():
        p = procs[addr]
        _, err = results[addr]
        assert p.returncode == 2, (addr, err)
        assert "Traceback" not in err
        said = err.strip().splitlines()
        assert len(said) == 2 and "connecting to the Dask scheduler" in said[0], err  # the wait is announced
        assert f"Dask scheduler {addr}" in said[1] and expected in said[1], err
        assert f"{SCHEDULER_TIMEOUT_S} s" in said[1]


# --------------------------------------------------------------------------- pool workers die with their parent

def _children(pid: int) -> set[int]:
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.add(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _entries(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory) -> Path:
    """The real 195,000-event rank as four ranks of one run (only the rank numbers relabelled)."""
    src = next(BIG.glob("*.json.gz"))
    with gzip.open(src, "rt") as fh:
        trace = json.load(fh)
    out = tmp_path_factory.mktemp("four_ranks")
    for r in range(4):
        trace["distributedInfo"].update(rank=r, world_size=4)
        if isinstance(trace.get("traceinspect"), dict):
            trace["traceinspect"].update(rank=r, world_size=4)
        (out / f"rank{r}.pt.trace.json").write_text(json.dumps(trace))
    return out


@pytest.mark.slow  # kills reports mid-run and waits for their workers
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_pool_workers_die_with_report(four_ranks, tmp_path, sig):
    from traceinspect.run.pool import cpu_count

    if cpu_count() < 2:
        pytest.skip("one core: the report runs without a pool")
    cache = tmp_path / "cache"
    proc = subprocess.Popen([sys.executable, "-m", "traceinspect", "report", str(four_ranks), "--workers", "2",
                             "--cache-dir", str(cache), "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        workers: set[int] = set()
        while len(workers) < 2 and proc.poll() is None and time.monotonic() < deadline:
            workers |= _children(proc.pid)
            time.sleep(0.05)
        assert workers, "the report never started its workers"
        assert proc.poll() is None, "the report ended before it could be stopped"
        time.sleep(0.5)  # the workers are decoding their ranks
        before = _entries(cache) if cache.exists() else set()
        proc.send_signal(sig)
        code = proc.wait(timeout=HANG_GUARD_S)
        gone_by = time.monotonic() + 20
        while any(_alive(w) for w in workers) and time.monotonic() < gone_by:
            time.sleep(0.1)
        assert not [w for w in workers if _alive(w)], "a worker outlived the report"
        after = _entries(cache) if cache.exists() else set()
        assert after <= before, f"written after the report was stopped: {sorted(after - before)}"
        if sig == signal.SIGTERM:
            assert code == 143
            assert b"terminated" in proc.stderr.read() and not _children(proc.pid)
    finally:
        proc.kill()


# --------------------------------------------------------------------------- exit codes

def test_internal_error_exit_3_traceback_saved(tmp_path, monkeypatch, capsys):
    import traceinspect.run as run

    def broken(*args, **kwargs):
        raise RuntimeError("an invariant did not hold\nsecond line")

    monkeypatch.setattr(run, "report_folder", broken)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = set(SMALL.parent.rglob("*"))
    assert main(["report", str(SMALL), "--no-cache"]) == 3
    line = one_line(capsys.readouterr().err)
    assert "internal error" in line and "RuntimeError: an invariant did not hold second line" in line
    saved = Path(line.split("the full traceback is in ")[1].split()[0].rstrip("."))
    assert saved.parent == tmp_path
    text = saved.read_text()
    assert "Traceback (most recent call last)" in text and "in broken" in text
    assert set(SMALL.parent.rglob("*")) == before  # nothing written beside the traces


def test_exit_codes_in_help():
    p = run_cli("--help")
    assert p.returncode == 0
    flat = " ".join(p.stdout.split())
    assert "Exit codes: 0 ok, 1 a finding reached --fail-on, 2 a usage or input error" in flat
    assert "3 an internal error" in flat


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
def test_full_stdout_is_one_line_exit_2():
    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "traceinspect", "report", str(SMALL), "--no-cache"],
                           stdout=full, stderr=subprocess.PIPE, text=True, timeout=HANG_GUARD_S)
    assert p.returncode == 2
    assert "cannot write to standard output" in one_line(p.stderr)


def test_closed_stdout_ends_quietly():
    # The reader is gone before the report is written: every write finds the pipe closed (what `| head -1`
    # does to the rest of a long report).
    p = subprocess.Popen([sys.executable, "-m", "traceinspect", "report", str(SMALL), "--no-cache", "--json", "-"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=HANG_GUARD_S) == 0, err
    assert err == "", err


# --------------------------------------------------------------------------- output files

def test_output_replaces_a_planted_link_never_its_target(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    out = tmp_path / "out"
    out.mkdir()
    for name in ("r.json", "r.md", "r.html"):
        (out / name).symlink_to(victim)
    p = run_cli("report", SMALL, "--no-cache", "-q", "--json", out / "r.json", "--markdown", out / "r.md",
                "--html", out / "r.html")
    assert p.returncode == 0, p.stderr
    assert victim.read_text() == "keep me"
    for name in ("r.json", "r.md", "r.html"):
        assert not (out / name).is_symlink() and (out / name).stat().st_size > 100
    assert json.loads((out / "r.json").read_text())["ranks"]
    assert sorted(p.name for p in out.iterdir()) == ["r.html", "r.json", "r.md"]  # no temporary file left


def test_output_onto_a_folder_is_one_line_and_leaves_nothing(tmp_path):
    (tmp_path / "r.json").mkdir()
    p = run_cli("report", SMALL, "--no-cache", "-q", "--json", tmp_path / "r.json")
    assert p.returncode == 2 and "r.json" in one_line(p.stderr)
    assert [x.name for x in tmp_path.iterdir()] == ["r.json"]


@pytest.mark.slow
def test_html_and_markdown_to_stdout(tmp_path):
    html = run_cli("report", SMALL, "--no-cache", "--html", "-")
    assert html.returncode == 0, html.stderr
    assert html.stdout.lstrip().lower().startswith("<!doctype html") and html.stdout.rstrip().endswith("</html>")
    md = run_cli("report", SMALL, "--no-cache", "--markdown", "-", cwd=tmp_path)
    assert md.returncode == 0, md.stderr
    assert not (tmp_path / "-").exists()
    to_file = run_cli("report", SMALL, "--no-cache", "-q", "--markdown", tmp_path / "r.md")
    assert to_file.returncode == 0 and md.stdout == (tmp_path / "r.md").read_text()  # the document, nothing else
    both = run_cli("report", SMALL, "--no-cache", "--html", "-", "--json", "-")
    assert both.returncode == 2 and "stdout" in one_line(both.stderr)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_is_refused_not_read(tmp_path):
    fifo = tmp_path / "report.json"
    os.mkfifo(fifo)
    for args in (("render", fifo), ("report", fifo), ("diff", fifo, SMALL)):
        p = run_cli(*args)
        assert p.returncode == 2 and "not a regular file" in one_line(p.stderr), (args, p.stderr)


def test_width_is_validated(capsys):
    for bad in ("-5", "0", "100000"):
        assert main(["report", str(SMALL), "--no-cache", "--width", bad]) == 2
        assert "--width" in one_line(capsys.readouterr().err)
    assert main(["report", str(SMALL), "--no-cache", "--width", "60"]) == 0
    out = capsys.readouterr().out
    assert out and max(len(line) for line in out.splitlines()) <= 60


def test_workers_validated_and_capped(capsys):
    from traceinspect.run.pool import cpu_count

    assert main(["report", str(SMALL), "--no-cache", "-q", "--workers", "-1"]) == 2
    assert "--workers" in one_line(capsys.readouterr().err)
    assert main(["report", str(SMALL), "--no-cache", "-q", "--workers", "100000"]) == 0
    assert f"--workers 100000 capped at {cpu_count()}" in one_line(capsys.readouterr().err)


@pytest.mark.slow
def test_all_runs_out_makes_the_new_folder(tmp_path):
    pytest.importorskip("matplotlib")
    folder = tmp_path / "traces"
    folder.mkdir()
    for src in (SMALL, OTHER_RUN):
        shutil.copy(next(src.glob("*.json.gz")), folder)
    new = tmp_path / "new"
    p = run_cli("report", folder, "--no-cache", "-q", "--all-runs", "--out", new)
    assert p.returncode == 0, p.stderr
    assert sorted(x.name for x in new.iterdir()) == ["run1", "run2"]
    for n in (1, 2):
        assert json.loads((new / f"run{n}" / "report.json").read_text())["runs"]["count"] == 2
    missing_parent = run_cli("report", folder, "--no-cache", "-q", "--all-runs", "--out", tmp_path / "a" / "b")
    assert missing_parent.returncode == 2 and "does not exist" in one_line(missing_parent.stderr)


# --------------------------------------------------------------------------- the command modules' imports

def test_command_modules_do_not_import_each_other():
    import ast

    cli = ROOT / "traceinspect" / "cli"

    def imports(name: str) -> set[str]:
        tree = ast.parse((cli / f"{name}.py").read_text())
        return {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 1}

    assert "main" not in imports("diff")
    for shared in ("options", "output", "exits", "runs"):
        assert not imports(shared) & {"main", "diff"}, shared


def test_help_is_plain_text_at_80_columns():
    """Every command's help, as a new user reads it in an 80-column terminal: no line past the edge, and no markup
    of the docstrings it is made from (``double backticks``, :role:`...`)."""
    from traceinspect.cli.main import cli

    for name in ["", *sorted(cli.commands)]:
        argv = [name, "--help"] if name else ["--help"]
        p = run_cli(*argv, env={**os.environ, "COLUMNS": "80"})
        assert p.returncode == 0, (name, p.stderr)
        for line in p.stdout.splitlines():
            assert len(line) <= 80 and "``" not in line and ":func:" not in line, (name, line)


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_after_a_signal_no_thread_prints_a_traceback(signame):
    """Ctrl-C and SIGTERM first silence the other threads: a process pool torn down by the signal can raise in its
    manager thread (Python 3.11 sets an error on a future the interrupted loop cancelled), and the command is to end
    with its one line. Before the signal, a thread's error is printed as ever."""
    code = ("import signal, threading\n"
            "from traceinspect.cli import exits\n"
            "exits.install_signal_handlers()\n"
            "def boom():\n"
            "    raise ZeroDivisionError('from a thread')\n"
            "def thread():\n"
            "    t = threading.Thread(target=boom); t.start(); t.join()\n"
            "thread()\n"
            "try:\n"
            f"    signal.raise_signal(signal.{signame})\n"
            "except BaseException as exc:\n"
            "    print(type(exc).__name__)\n"
            "thread()\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [{"SIGINT": "KeyboardInterrupt", "SIGTERM": "Terminated"}[signame]]
    assert p.stderr.count("ZeroDivisionError: from a thread") == 1, p.stderr  # the one before the signal
