"""The cache: in the user cache folder, never the trace folder; data only (no pickle), so a crafted entry is a
miss and never runs; a size cap; and the cached re-report imports no pandas."""

from __future__ import annotations

import json

import hashlib
import os
import pickle
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from traceinspect.cli.main import main
from traceinspect.config import Config
from traceinspect.run import cache, cache_store, cache_tables, report_folder

from public_traces import DIFF_CONTROL, need, only_file

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "fixtures" / "gpu" / "big_baseline"


def snapshot(folder: Path) -> dict:
    """Every path under ``folder`` (the listing, folders included) with its mode and, for files, a SHA-256."""
    out = {}
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
        out[str(p.relative_to(folder))] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), digest, st.st_mtime_ns)
    return out


class Marker:
    """A pickle that, if anything ever unpickled it, would create the file ``path``."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def _copy_fixture(dst: Path) -> Path:
    f = next(BASELINE.glob("*.json.gz"))
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copy(f, dst / f.name)
    return dst


def _report_json(folder: Path, *args) -> bytes:
    out = folder.parent / f"out-{len(list(folder.parent.glob('out-*')))}.json"
    assert main(["report", str(folder), "--json", str(out), "-q", "--workers", "1", *args]) == 0
    return out.read_bytes()


def test_default_cache_is_the_user_cache_folder(monkeypatch):
    from platformdirs import user_cache_dir

    monkeypatch.delenv(cache.ENV, raising=False)
    assert cache.cache_root(Config()) == Path(user_cache_dir("traceinspect", appauthor=False))
    monkeypatch.setenv(cache.ENV, "/somewhere/else")
    assert cache.cache_root(Config()) == Path("/somewhere/else")
    assert cache.cache_root(Config(cache_dir="/explicit")) == Path("/explicit")


@pytest.mark.parametrize("read_only", [False, True], ids=["writable", "read-only"])
def test_report_leaves_the_trace_folder_byte_for_byte_unchanged(tmp_path, monkeypatch, read_only):
    cache_dir = tmp_path / "user-cache"
    monkeypatch.setenv(cache.ENV, str(cache_dir))
    folder = _copy_fixture(tmp_path / "traces")
    (folder / "notes.txt").write_text("a file of the user's\n")
    if read_only:
        for p in folder.iterdir():
            p.chmod(0o444)
        folder.chmod(0o555)
    before = snapshot(folder)
    try:
        out = tmp_path / "out"
        out.mkdir()  # --out makes its own folder, not missing parents
        first = _report_json(folder, "--out", str(out / "a"))  # analysis, plots, Markdown, cache writes
        second = _report_json(folder, "--out", str(out / "b"))  # from the cache
        report_folder(folder, Config(workers=1))  # the Python API
        assert main(["diff", str(folder), str(folder), "-q"]) == 0
        after = snapshot(folder)
    finally:
        folder.chmod(0o755)
    assert after == before
    assert first == second
    assert list(cache_dir.rglob("report-*.msgpack")), "the cache went to the user cache folder"


def test_crafted_cache_entries_are_refused_not_executed(tmp_path):
    """Every cache entry replaced by a pickle whose loading would write a marker, a truncated Parquet file or JSON
    of the wrong shape: the report is the uncached one, and nothing ran."""
    folder = _copy_fixture(tmp_path / "traces")
    cache_dir = tmp_path / "cache"
    good = _report_json(folder, "--no-cache")
    assert _report_json(folder, "--cache-dir", str(cache_dir)) == good
    entries = sorted(p for p in cache_dir.rglob("*") if cache_store.ENTRY.fullmatch(p.name))
    assert {p.name.split("-")[0] for p in entries} == {"cols", "rank", "report"}
    marker = tmp_path / "pwned"
    payload = pickle.dumps(Marker(marker))
    for kind, poison in (("pickle", lambda p: payload),
                         ("truncated", lambda p: p.read_bytes()[: len(p.read_bytes()) // 2]),
                         ("wrong shape", lambda p: b'{"schema": 1, "ranks": "x", "fields": [], "steps": 3}')):
        for p in entries:
            data = poison(p)
            p.write_bytes(data)
        # Where older versions kept pickles: inside the trace folder; never looked at.
        old = tmp_path / "traces2"
        shutil.copytree(folder, old, dirs_exist_ok=True)
        (old / ".traceinspect-cache").mkdir(exist_ok=True)
        (old / ".traceinspect-cache" / "0123.result.pkl").write_bytes(payload)
        assert _report_json(folder, "--cache-dir", str(cache_dir)) == good, kind
        assert not marker.exists(), kind
        for p in entries:  # the next round poisons the entries again (the report just rewrote them)
            p.write_bytes(data)
    assert not marker.exists()


def test_extension_typed_parquet_is_refused():
    """Arrow extension types are the one way Parquet carries Python objects: refused before reaching pandas."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as papq

    class Tagged(pa.ExtensionType):
        def __init__(self):
            super().__init__(pa.int64(), "traceinspect.test.tagged")

        def __arrow_ext_serialize__(self):
            return b""

        @classmethod
        def __arrow_ext_deserialize__(cls, storage_type, serialized):
            return cls()

    pa.register_extension_type(Tagged())
    try:
        arr = pa.ExtensionArray.from_storage(Tagged(), pa.array([1, 2]))
        buf = io.BytesIO()
        papq.write_table(pa.table({"x": arr}), buf)
        with pytest.raises(ValueError, match="extension type refused"):
            cache_tables.safe_table(buf.getvalue(), 10, 10**6)
    finally:
        pa.unregister_extension_type("traceinspect.test.tagged")


def test_size_cap_evicts_least_recently_used(tmp_path):
    entry = 1000 + cache_store._HEADER  # the payload and its seal
    cfg = Config(cache_dir=str(tmp_path), cache_max_bytes=2 * entry + 500)
    d = tmp_path / f"v{cache.FORMAT}"
    for name in ("a", "b"):  # "a" written before "b"
        cache._write(cfg, f"report-{name}.json", bytes(1000))
    assert cache._read(cfg, "report-a.json") == bytes(1000)  # "a" used since: "b" is now the least recent
    cache._write(cfg, "report-c.json", bytes(1000))  # 3 entries > the cap
    left = sorted(p.name for p in d.iterdir() if cache_store.ENTRY.fullmatch(p.name))
    assert left == ["report-a.json", "report-c.json"]
    assert sum((d / n).stat().st_size for n in left) <= cfg.cache_max_bytes


def test_cache_dir_in_or_at_the_trace_folder_is_refused_and_the_traces_are_found(tmp_path, capfd):
    """--cache-dir at the trace folder itself or inside it: the traces are found, the report is the uncached one,
    the folder is left byte for byte as it was, and stderr says in one line that the cache was not used."""
    folder = _copy_fixture(tmp_path / "traces")
    first = _report_json(folder, "--no-cache")
    before = snapshot(folder)
    for cache_dir in (folder, folder / "cache"):
        capfd.readouterr()
        assert _report_json(folder, "--cache-dir", str(cache_dir)) == first
        err = capfd.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith("traceinspect: cache not used:") and str(folder) in err[0], err
        assert snapshot(folder) == before


def test_a_path_that_is_not_there_is_one_line_about_the_path(tmp_path, capfd):
    """A trace path that does not exist is the report's one error line; the cache, whose folder lies inside the
    missing path's parent (here the temporary folder), is not blamed for it."""
    missing = tmp_path / "no-such-run"
    assert main(["report", str(missing), "--cache-dir", str(tmp_path / "cache"), "-q"]) == 2
    err = capfd.readouterr().err.splitlines()
    assert err == [f"traceinspect: {missing}: no such file or folder"], err


def test_cached_report_imports_no_pandas(tmp_path):
    need(DIFF_CONTROL)
    folder = tmp_path / "traces"
    folder.mkdir()
    shutil.copy(only_file(DIFF_CONTROL), folder / "rank3.json.gz")
    code = ("import sys; from traceinspect.cli.main import main; "
            f"rc = main(['report', {str(folder)!r}, '--json', {str(tmp_path / 'r.json')!r}, '-q']); "
            "print(rc, *sorted(m for m in ('pandas', 'numpy', 'pyarrow', 'matplotlib') if m in sys.modules))")
    env = {**os.environ, cache.ENV: str(tmp_path / "cache")}
    run = lambda: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,  # noqa: E731
                                 timeout=300).stdout.split()
    assert run() == ["0", "numpy", "pandas", "pyarrow"]  # first: analysed
    assert run() == ["0"]  # second: from the cache, nothing heavy imported


def test_diff_and_api_reuse_the_whole_report_cache(tmp_path, monkeypatch):
    """report_folder is the one entry: after one report, diff and the Python API take the document from the cache
    (the analysis is not run again: it is replaced here by a stand-in that fails)."""
    import traceinspect.run as run

    folder = _copy_fixture(tmp_path / "traces")
    cfg = Config(workers=1, cache_dir=str(tmp_path / "cache"))
    first = report_folder(folder, cfg)
    assert not first.from_cache

    def no_analysis(*a, **k):
        raise AssertionError("analysed again")

    monkeypatch.setattr(run, "_analyze", no_analysis)
    again = report_folder(folder, cfg)
    assert again.from_cache and again.doc == first.doc
    assert main(["diff", str(folder), str(folder), "-q", "--cache-dir", str(tmp_path / "cache"), "--workers", "1"]) == 0


def test_observer_hears_begin_progress_and_end(tmp_path):
    from traceinspect.run import Observer

    class Log(Observer):
        def __init__(self):
            self.calls = []

        def begin(self, files, total_bytes):
            self.calls.append(("begin", len(files), total_bytes))

        def decoded(self, path, nbytes, total=0):
            self.calls.append(("decoded", nbytes))

        def end(self, from_cache):
            self.calls.append(("end", from_cache))

    folder = _copy_fixture(tmp_path / "traces")
    size = sum(p.stat().st_size for p in folder.iterdir())
    cfg = Config(workers=1, cache_dir=str(tmp_path / "cache"))
    log = Log()
    report_folder(folder, cfg, log)
    assert log.calls[0] == ("begin", 1, size) and log.calls[-1] == ("end", False)
    log2 = Log()
    report_folder(folder, cfg, log2)
    assert log2.calls == [("end", True)]


def test_cached_report_names_the_files_as_given_from_another_folder(tmp_path, monkeypatch):
    """The same traces reported from two working folders under two relative spellings: each report names its
    source and files as given, though the second could have come from the first's cache."""
    folder = _copy_fixture(tmp_path / "runs" / "traces")
    cache_dir = tmp_path / "cache"
    outs = []
    for cwd, rel in ((tmp_path / "runs", "traces"), (tmp_path, "runs/traces")):
        monkeypatch.chdir(cwd)
        out = tmp_path / f"r-{len(outs)}.json"
        assert main(["report", rel, "--json", str(out), "-q", "--cache-dir", str(cache_dir)]) == 0
        outs.append((rel, json.loads(out.read_text())))
    for rel, d in outs:
        assert d["source"] == rel
        assert all(f.startswith(rel + "/") for r in d["ranks"] for f in r["files"]), rel
    assert folder.is_dir()


def test_the_open_store_is_held_and_a_removed_folder_is_made_again(tmp_path):
    """One process keeps one store open between entries (no folder check or index connection per entry); a
    folder removed meanwhile is made again by the next write, and a new report checks the folder afresh."""
    cfg = Config(cache_dir=str(tmp_path / "cache"))
    cache._write(cfg, "report-a.json", bytes(100))
    first = cache._store(cfg)
    cache._write(cfg, "report-b.json", bytes(100))
    assert cache._store(cfg) is first
    assert cache._read(cfg, "report-a.json") == bytes(100)
    shutil.rmtree(tmp_path / "cache")
    cache._write(cfg, "report-c.json", bytes(100))
    assert cache._store(cfg) is not first
    assert cache._read(cfg, "report-c.json") == bytes(100)
    assert (tmp_path / "cache" / f"v{cache.FORMAT}" / "report-c.json").is_file()
    (tmp_path / "cache").chmod(0o777)
    assert "writable by group or others" in cache.refusal(cfg)
    assert cache._read(cfg, "report-c.json") is None  # refused: no store is held for it any more
