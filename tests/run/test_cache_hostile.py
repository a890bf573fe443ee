"""The cache cannot be turned against its user: a shared folder is refused, no planted link is followed, entries are
bound to their key and bounded by their sources, a rewrite with the same size and mtime is a miss, eviction works
from an index, and the column key follows every source file of the decoder. Each attack is built here from a real
fixture."""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
from pathlib import Path

import pytest

from traceinspect.cli.main import main
from traceinspect.config import Config
from traceinspect.run import cache, cache_store, cache_tables, report_folder

ROOT = Path(__file__).resolve().parents[2]
WARNED = ROOT / "fixtures" / "gpu" / "big_baseline"  # 4 warnings: --fail-on warning exits 1
CLEAN = ROOT / "fixtures" / "gpu" / "big_optimized"  # none: exits 0


def copy_of(fixture: Path, dst: Path) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    for f in fixture.glob("*.json.gz"):
        shutil.copy(f, dst / f.name)
    return dst


def report(folder: Path, cache_dir: Path, *args) -> int:
    return main(["report", str(folder), "-q", "--workers", "1", "--cache-dir", str(cache_dir), *args])


def entries(cache_dir: Path, kind: str = "") -> list[Path]:
    return sorted(p for p in (cache_dir / f"v{cache.FORMAT}").iterdir()
                  if cache_store.ENTRY.fullmatch(p.name) and p.name.startswith(kind))


def test_a_new_cache_folder_is_private(tmp_path):
    root = tmp_path / "new" / "cache"
    assert report(copy_of(CLEAN, tmp_path / "t"), root) == 0
    for p in (root, root / f"v{cache.FORMAT}"):
        assert stat.S_IMODE(p.stat().st_mode) == 0o700, p
    assert (root / "CACHEDIR.TAG").read_bytes() == cache_store.TAG
    assert stat.S_IMODE((root / f"v{cache.FORMAT}" / cache_store.SECRET).stat().st_mode) == 0o600


@pytest.mark.parametrize("how", ["world-writable", "group-writable", "another owner", "a link"])
def test_a_shared_cache_folder_is_refused_in_one_line(tmp_path, capfd, how):
    folder = copy_of(WARNED, tmp_path / "t")
    root = tmp_path / "shared"
    root.mkdir()
    if how == "world-writable":
        root.chmod(0o777)
    elif how == "group-writable":
        root.chmod(0o770)
    elif how == "another owner":
        if os.geteuid() != 0:
            pytest.skip("making a folder another user's needs root")
        os.chown(root, 12345, 12345)
    else:
        real = tmp_path / "real"
        real.mkdir(mode=0o700)
        root.rmdir()
        root.symlink_to(real)
    capfd.readouterr()
    assert report(folder, root, "--fail-on", "warning") == 1  # the report ran, uncached, and found the warnings
    err = capfd.readouterr().err.splitlines()
    notes = [line for line in err if line.startswith("traceinspect: cache not used:")]
    assert len(notes) == 1 and str(root) in notes[0], err
    assert list(root.iterdir()) == []  # nothing was written there (through the link either)


def test_planted_links_make_the_cache_neither_delete_nor_create_elsewhere(tmp_path):
    """A link named like an old version folder, like CACHEDIR.TAG, or like an entry: eviction deletes nothing
    where it points, the tag is never written through a link, an entry is never read through one."""
    victim = tmp_path / "victim"
    copy_of(CLEAN, victim)
    (victim / "notes.txt").write_text("the user's\n")
    before = sorted((p.name, p.read_bytes()) for p in victim.iterdir())
    folder = copy_of(WARNED, tmp_path / "t")

    # v3 -> the victim's folder, in a cache with a cap small enough that every write evicts.
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    (root / "CACHEDIR.TAG").write_bytes(cache_store.TAG)
    (root / "v3").symlink_to(victim)
    cfg = Config(workers=1, cache_dir=str(root), cache_max_bytes=50_000)
    report_folder(folder, cfg)
    cache.evict(cfg)
    assert sorted((p.name, p.read_bytes()) for p in victim.iterdir()) == before

    # CACHEDIR.TAG -> a file that does not exist yet: not created, and the cache is refused.
    root2 = tmp_path / "cache2"
    root2.mkdir(mode=0o700)
    target = tmp_path / "created-through-the-link"
    (root2 / "CACHEDIR.TAG").symlink_to(target)
    assert cache.refusal(Config(cache_dir=str(root2))) is not None
    report_folder(folder, Config(workers=1, cache_dir=str(root2)))
    assert not target.exists()

    # An entry replaced by a link to a file of the victim's: a miss, and rewriting the entry replaces the link only.
    assert report(folder, root) == 0
    entry = entries(root, "report")[0]
    entry.unlink()
    entry.symlink_to(victim / "notes.txt")
    assert not report_folder(folder, cfg).from_cache
    assert sorted((p.name, p.read_bytes()) for p in victim.iterdir()) == before
    assert not entry.is_symlink()


def test_forged_and_moved_entries_are_misses(tmp_path):
    """A clean folder's report entry copied over the warned folder's entry (the user would be told all is well),
    an entry written without the cache's seal, and one file's columns under another file's key: all misses."""
    warned, clean = copy_of(WARNED, tmp_path / "warned"), copy_of(CLEAN, tmp_path / "clean")
    root = tmp_path / "cache"
    assert report(warned, root, "--fail-on", "warning") == 1
    warned_entry = entries(root, "report")[0]
    assert report(clean, root, "--fail-on", "warning") == 0
    clean_entry = next(p for p in entries(root, "report") if p != warned_entry)
    shutil.copy(clean_entry, warned_entry)  # moved to another key
    assert report(warned, root, "--fail-on", "warning") == 1
    # Forged: the clean report's document as a bare entry (what a writer without the secret can produce).
    warned_entry.write_bytes(cache_store.MAGIC + bytes(32) + clean_entry.read_bytes()[cache_store._HEADER:])
    assert report(warned, root, "--fail-on", "warning") == 1
    # Columns of the clean file under the warned file's key.
    w, c = next(warned.iterdir()), next(clean.iterdir())
    cols = root / f"v{cache.FORMAT}"
    shutil.copy(cols / cache._cols_name(c), cols / cache._cols_name(w))
    cfg = Config(cache_dir=str(root))
    assert cache.get(w, cfg) is None
    assert cache.get(c, cfg) is not None


@pytest.mark.slow  # writes and refuses a large crafted table
def test_a_large_crafted_table_is_refused_before_it_is_read(tmp_path, monkeypatch):
    """A Parquet table of 20 million rows that compresses to a few hundred KB, sealed with the cache's own secret
    (the second line of defence: the seal is the first), under the columns key of a small real trace: its footer is
    checked against the bounds of the source and its data never read."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as papq

    folder = copy_of(CLEAN, tmp_path / "t")
    trace = next(folder.iterdir())
    root = tmp_path / "cache"
    cfg = Config(cache_dir=str(root))
    bomb = cache_tables._parquet(pa.table({"ts": np.zeros(20_000_000, dtype=np.int64)}))
    assert len(bomb) < 4 << 20
    cache._write(cfg, cache._cols_name(trace), bomb)
    read = papq.ParquetFile.read
    monkeypatch.setattr(papq.ParquetFile, "read", lambda *a, **k: pytest.fail("the table's data was read"))
    assert cache.get(trace, cfg) is None
    _, rows, nbytes = cache._limits(cache._decoded_bound([trace]), cfg)
    with pytest.raises(cache_tables.TooLarge):
        cache_tables.safe_table(bomb, rows, nbytes)
    monkeypatch.setattr(papq.ParquetFile, "read", read)
    # An entry larger than its bound is not even read into memory: a miss from its size alone.
    limit = cache._limits(cache._decoded_bound([trace]), cfg)[0]
    store = cache._store(cfg)
    try:
        store.write("report-0-1.json", bytes(limit + 1), cfg.cache_max_bytes)
        assert store.read("report-0-1.json", limit) is None
        assert store.read("report-0-1.json", limit + 1) is not None
    finally:
        store.close()


@pytest.mark.parametrize("how", ["cp -p", "rewrite in place, same size and mtime"])
def test_a_file_rewritten_with_the_same_size_and_mtime_is_a_miss(tmp_path, how):
    """The warned run's file replaced by the clean run's, padded or cut to the same size, with its old mtime."""
    warned = copy_of(WARNED, tmp_path / "t")
    trace = next(warned.iterdir())
    root = tmp_path / "cache"
    assert report(warned, root, "--fail-on", "warning") == 1
    st = trace.stat()
    other = next(CLEAN.glob("*.json.gz")).read_bytes()
    other = (other + bytes(st.st_size))[: st.st_size]  # trailing zeros after a gzip stream are ignored
    key = cache._key(trace)
    if how == "cp -p":
        tmp = tmp_path / "elsewhere.json.gz"
        tmp.write_bytes(other)
        os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
        shutil.copy2(tmp, trace)  # what cp -p, rsync -t and tar do: the content, then the old times
    else:
        with open(trace, "r+b") as f:
            f.write(other)
        os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert trace.stat().st_size == st.st_size and trace.stat().st_mtime_ns == st.st_mtime_ns
    assert cache._key(trace) != key
    assert report(warned, root, "--fail-on", "warning") == main(
        ["report", str(warned), "-q", "--workers", "1", "--no-cache", "--fail-on", "warning"])


def test_the_sampled_bytes_decide_even_with_the_same_inode_and_times(tmp_path):
    trace = next(copy_of(WARNED, tmp_path / "t").iterdir())
    key = cache.identity(trace)
    with open(trace, "r+b") as f:  # one byte in the middle: whatever the clocks say, the sampled bytes differ
        f.seek(trace.stat().st_size // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xFF]))
    changed = cache.identity(trace)
    strip = lambda k: k.rsplit("|", 1)  # noqa: E731  (the stat part, the hash of the sampled bytes)
    assert strip(changed)[1] != strip(key)[1]


def test_eviction_works_from_the_index_without_listing_the_folder(tmp_path, monkeypatch):
    """600 writes with a cap of 100 entries: the folder is listed when the index is made and never again, each
    write evicts at most a bounded number of entries, and the eviction query uses the index on last use."""
    cfg = Config(cache_dir=str(tmp_path), cache_max_bytes=100 * (200 + cache_store._HEADER))
    listings = []
    real = os.listdir
    monkeypatch.setattr(cache_store.os, "listdir", lambda *a: listings.append(a) or real(*a))
    for i in range(600):
        cache._write(cfg, f"report-{i:x}.json", bytes(200))
    listed = len(listings)
    d = tmp_path / f"v{cache.FORMAT}"
    files = sorted(p.name for p in d.iterdir() if cache_store.ENTRY.fullmatch(p.name))
    assert listed <= 3  # the root before its tag, an old-version check, the index's first build
    assert files == sorted(f"report-{i:x}.json" for i in range(500, 600))  # the 100 most recent
    with sqlite3.connect(d / cache_store.INDEX) as db:
        assert sorted(n for (n,) in db.execute("SELECT name FROM entries")) == files
        assert db.execute("SELECT v FROM meta WHERE k = 'total'").fetchone()[0] == sum(
            (d / n).stat().st_size for n in files)
        plan = " ".join(str(r) for r in db.execute(
            "EXPLAIN QUERY PLAN SELECT name, size FROM entries WHERE name IS NOT ? ORDER BY used LIMIT 64", ("x",)))
    assert "entries_used" in plan


def test_a_lost_or_damaged_index_is_rebuilt_from_the_folder(tmp_path):
    cfg = Config(cache_dir=str(tmp_path), cache_max_bytes=10 * (100 + cache_store._HEADER))
    for i in range(5):
        cache._write(cfg, f"report-{i}.json", bytes(100))
    index = tmp_path / f"v{cache.FORMAT}" / cache_store.INDEX
    index.write_bytes(b"not a database" * 100)
    for i in range(5, 15):
        cache._write(cfg, f"report-{i}.json", bytes(100))
    assert len(entries(tmp_path)) == 10  # the cap holds over the entries the old index knew


def test_the_column_key_follows_every_source_of_the_decoder(tmp_path):
    """The key of decoded columns comes from walking the decoder's imports: load/trace.py's category map is in it
    (a change there changes the key), the renderers are not."""
    pkg = tmp_path / "traceinspect"
    shutil.copytree(cache._PKG, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    sources = {str(p.relative_to(pkg)) for p in cache._closure(pkg, "load", ("load",))}
    assert {"load/trace.py", "load/decode.py", "load/columns.py", "load/limits.py"} <= sources
    assert not any(s.startswith(("render/", "cli/", "diagnose/")) for s in sources)
    before = cache.code_digest("load", ("load",), pkg=pkg)
    results = cache.code_digest("run", pkg=pkg)
    trace = pkg / "load" / "trace.py"
    src = trace.read_text()
    assert "CATEGORY_KIND = {" in src
    trace.write_text(src.replace("CATEGORY_KIND = {", 'CATEGORY_KIND = {"new_category": Kind.KERNEL,', 1))
    assert cache.code_digest("load", ("load",), pkg=pkg) != before
    assert cache.code_digest("run", pkg=pkg) != results
    trace.write_text(src)
    (pkg / "render" / "text.py").write_text((pkg / "render" / "text.py").read_text() + "\n# changed\n")
    assert cache.code_digest("load", ("load",), pkg=pkg) == before
