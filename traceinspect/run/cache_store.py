"""The cache's folder: private, no symbolic link followed, atomic writes, entries sealed to their name, an index.

**Private.** The root is created ``0700``; an existing root is used only when it is a real folder (not a link), owned
by the user, not group- or world-writable, and either empty or already a traceinspect cache (its ``CACHEDIR.TAG``
holds exactly our bytes). Anything else is refused: ``refusal`` says why in a few words and nothing is read or
written there (the report runs without the cache).

**No link followed.** Every file is opened relative to a folder descriptor with ``O_NOFOLLOW`` (and folders with
``O_DIRECTORY``), and deletion goes by name inside the version folder, so a planted link (named like a version
folder, like ``CACHEDIR.TAG``, or like an entry) can neither be read through nor make the cache create or delete
anything where it points. Old version folders are removed with ``shutil.rmtree(dir_fd=...)``, which never follows one.

**Atomic.** An entry is written to a temporary file in its folder, then renamed over its name (``os.replace``).

**Sealed.** Each entry is ``MAGIC | MAC | payload``, the MAC a keyed BLAKE2b of the entry's name and payload under a
random 32-byte secret kept in the cache (``0600``). A file written by anyone else, damaged, or moved to another
name fails the seal and is a miss: its payload never reaches a parser. The file's size is checked against a bound
before it is read.

**Index.** ``index.sqlite`` (standard library ``sqlite3``) holds each entry's size and last use and the running total,
so a write evicts the least recently used entries in ``O(log n)`` each, without listing the folder. The folder is
listed only when the index is made (first use, or a damaged index) and, to find files the index lost (a run killed
between its write and the index), once every ``max(1000, entries)`` writes: amortised constant time per write.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import os
import re
import secrets
import shutil
import sqlite3
import stat
import time
from contextlib import contextmanager
from pathlib import Path

TAG_NAME = "CACHEDIR.TAG"
# The standard signature (https://bford.info/cachedir/) and our own line: this exact content is what marks a folder
# as traceinspect's cache (a CACHEDIR.TAG of another tool is not ours).
TAG = b"Signature: 8a477f597d28d172789f06886806bc55\n# traceinspect's cache (https://bford.info/cachedir/)\n"
VERSION_DIR = re.compile(r"v\d+")
MAGIC = b"TIcache1"
_MAC_BYTES = 32
_HEADER = len(MAGIC) + _MAC_BYTES
SECRET = "secret"
INDEX = "index.sqlite"
ENTRY = re.compile(r"(cols|rank|report)-[0-9a-f][0-9a-f-]*\.(parquet|json|msgpack)")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SWEEP_EVERY = 1000  # at least this many writes between two listings of the folder


class Refused(Exception):
    """The folder is not a private cache of ours; the message says why in a few words."""


def _private(fd: int, what: str) -> None:
    st = os.fstat(fd)
    if st.st_uid != os.getuid():
        raise Refused(f"{what} is owned by uid {st.st_uid}, not by you")
    if st.st_mode & 0o022:
        raise Refused(f"{what} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})")


def _open_dir(name, dir_fd: int | None, what: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Refused(f"{what} is a symbolic link or not a folder") from None
        raise


def _read_small(name: str, dir_fd: int, limit: int, where: Path) -> bytes | None:
    """A regular file's bytes (``None`` when absent); a link or anything else is refused."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(f"{where / name} is a symbolic link") from None
        raise
    with closing_fd(fd):
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            raise Refused(f"{where / name} is not a small regular file")
        return os.read(fd, limit + 1)


@contextmanager
def closing_fd(fd: int):
    try:
        yield fd
    finally:
        os.close(fd)


def _publish(name: str, data: bytes, dir_fd: int, replace: bool = True) -> None:
    """Write ``data`` under ``name`` atomically: a temporary file in the same folder, then a rename (or, with
    ``replace=False``, a hard link, which fails when ``name`` exists: the first writer wins)."""
    tmp = f".{secrets.token_hex(8)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        with closing_fd(fd):
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        if replace:
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            return
        try:
            os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        except FileExistsError:
            pass
    finally:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except FileNotFoundError:
            pass


def _remove_old_versions(root_fd: int, version: str) -> None:
    """Older layouts' folders (``v3``, ...) are never read again: removed, never through a link."""
    for name in os.listdir(root_fd):
        if VERSION_DIR.fullmatch(name) and name != version:
            try:
                st = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
                    shutil.rmtree(name, dir_fd=root_fd)
            except OSError:
                pass


class Store:
    """An open, checked cache: ``root`` and its version folder ``name`` (``v<FORMAT>``)."""

    def __init__(self, root: Path, version: str):
        self.root, self.version = root, version
        self.fd = -1
        self._db: sqlite3.Connection | None = None  # the index, connected on first use and kept
        root_fd = self._open_root()
        try:
            try:
                os.mkdir(version, 0o700, dir_fd=root_fd)
                _remove_old_versions(root_fd, version)  # once, when this layout's folder is made
            except FileExistsError:
                pass
            self.fd = _open_dir(version, root_fd, f"{root}/{version}")
            _private(self.fd, f"{root}/{version}")
        finally:
            os.close(root_fd)
        self.secret = self._secret()

    def _open_root(self) -> int:
        root = self.root
        root.parent.mkdir(parents=True, exist_ok=True)  # the folders above are the user's, made as usual
        try:
            os.mkdir(root, 0o700)
        except FileExistsError:
            pass
        fd = _open_dir(root, None, str(root))
        try:
            _private(fd, str(root))
            tag = _read_small(TAG_NAME, fd, 4096, root)
            if tag is None:
                if [n for n in os.listdir(fd) if not n.startswith(".")]:  # only before the tag exists: once
                    raise Refused(f"{root} holds files and is not a traceinspect cache (no {TAG_NAME} of ours)")
                _publish(TAG_NAME, TAG, fd, replace=False)
            elif tag != TAG:
                raise Refused(f"{root} holds another {TAG_NAME} than traceinspect's")
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _secret(self) -> bytes:
        data = _read_small(SECRET, self.fd, _MAC_BYTES, self.root / self.version)
        if data is None:
            _publish(SECRET, secrets.token_bytes(_MAC_BYTES), self.fd, replace=False)
            data = _read_small(SECRET, self.fd, _MAC_BYTES, self.root / self.version)
        if data is None or len(data) != _MAC_BYTES:
            raise Refused(f"{self.root}: damaged {SECRET}")
        return data

    def close(self) -> None:
        self._disconnect()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def usable(self) -> bool:
        """Open, and its folder still there (a folder removed meanwhile is made again by a fresh ``Store``)."""
        try:
            return self.fd >= 0 and os.fstat(self.fd).st_nlink > 0
        except OSError:
            return False

    # ----------------------------------------------------------------------------------------------------------
    # Entries

    def _mac(self, name: str, payload) -> bytes:
        h = hashlib.blake2b(key=self.secret, digest_size=_MAC_BYTES, person=b"traceinspect")
        h.update(name.encode() + b"\0")
        h.update(payload)
        return h.digest()

    def read(self, name: str, limit: int) -> memoryview | None:
        """The payload of entry ``name`` when it is a regular file of at most ``limit`` bytes sealed to this name."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.fd)
        except OSError:
            return None
        with closing_fd(fd):
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or not _HEADER <= st.st_size <= limit + _HEADER:
                return None
            data = bytearray(st.st_size)
            view = memoryview(data)
            got = 0
            while got < st.st_size:
                n = os.readv(fd, [view[got:]])
                if n == 0:
                    return None
                got += n
        payload = view[_HEADER:]
        if data[:len(MAGIC)] != MAGIC or not hmac.compare_digest(data[len(MAGIC):_HEADER], self._mac(name, payload)):
            return None
        self._index(lambda db: db.execute("UPDATE entries SET used = ? WHERE name = ?", (time.time_ns(), name)))
        return payload

    def write(self, name: str, payload: bytes, cap: int) -> None:
        size = _HEADER + len(payload)
        if size > cap:
            return
        _publish(name, MAGIC + self._mac(name, payload) + payload, self.fd)
        self._index(lambda db: self._account(db, name, size, cap))

    def exists(self, name: str) -> bool:
        try:
            return stat.S_ISREG(os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_mode)
        except OSError:
            return False

    def evict(self, cap: int) -> None:
        self._index(lambda db: self._evict(db, cap, None))

    # ----------------------------------------------------------------------------------------------------------
    # The index

    def _index(self, change) -> None:
        """Run ``change(db)`` in one write transaction of the index (made, or remade when damaged, first)."""
        for attempt in (0, 1):
            try:
                if self._db is None:
                    self._db = self._connect()
                db = self._db
                db.execute("BEGIN IMMEDIATE")
                try:
                    if db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'entries'").fetchone()[0] == 0:
                        self._build(db)
                    change(db)
                    db.execute("COMMIT")
                except BaseException:
                    db.rollback()
                    raise
                return
            except sqlite3.DatabaseError:
                self._disconnect()
                if attempt or not self._damaged():
                    return

    def _disconnect(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def _connect(self) -> sqlite3.Connection:
        try:
            st = os.stat(INDEX, dir_fd=self.fd, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                raise sqlite3.DatabaseError("index is not a regular file")
            if st.st_mode & 0o077:  # an index made before it was private: only its owner reads it now
                os.chmod(INDEX, 0o600, dir_fd=self.fd)
        except FileNotFoundError:  # made here, private (0600) like every entry: SQLite gives its journal the same mode
            try:
                os.close(os.open(INDEX, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                                 dir_fd=self.fd))
            except FileExistsError:
                pass  # another report made it first
        path = self.root / self.version / INDEX
        db = sqlite3.connect(f"file:{path}?nofollow=1", uri=True, timeout=30, isolation_level=None)
        db.execute("PRAGMA synchronous = OFF")  # a damaged index is rebuilt from the folder: no fsync per write
        return db

    def _damaged(self) -> bool:
        """Remove a damaged index (it is remade from the folder); False when it is not a file of ours to remove."""
        try:
            if stat.S_ISREG(os.stat(INDEX, dir_fd=self.fd, follow_symlinks=False).st_mode):
                os.unlink(INDEX, dir_fd=self.fd)
                return True
        except OSError:
            pass
        return False

    def _build(self, db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE entries (name TEXT PRIMARY KEY, size INTEGER NOT NULL, used INTEGER NOT NULL)")
        db.execute("CREATE INDEX entries_used ON entries (used)")
        db.execute("CREATE TABLE meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL)")
        db.executemany("INSERT INTO meta VALUES (?, 0)", [("total",), ("writes",)])
        self._sweep(db)

    def _sweep(self, db: sqlite3.Connection) -> None:
        """List the folder once: index the entries the index lacks, drop rows of files gone, old temporary files."""
        known = dict(db.execute("SELECT name, size FROM entries"))
        now = time.time_ns()
        for name in os.listdir(self.fd):
            try:
                st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            if name.endswith(".tmp") and now - st.st_mtime_ns > 3600 * 10**9:  # a writer killed an hour ago
                os.unlink(name, dir_fd=self.fd)
            elif ENTRY.fullmatch(name):
                if known.pop(name, None) != st.st_size:
                    db.execute("INSERT OR REPLACE INTO entries VALUES (?, ?, ?)", (name, st.st_size, st.st_mtime_ns))
        db.executemany("DELETE FROM entries WHERE name = ?", [(n,) for n in known])
        db.execute("UPDATE meta SET v = (SELECT coalesce(sum(size), 0) FROM entries) WHERE k = 'total'")
        db.execute("UPDATE meta SET v = 0 WHERE k = 'writes'")

    def _account(self, db: sqlite3.Connection, name: str, size: int, cap: int) -> None:
        old = db.execute("SELECT size FROM entries WHERE name = ?", (name,)).fetchone()
        db.execute("INSERT OR REPLACE INTO entries VALUES (?, ?, ?)", (name, size, time.time_ns()))
        db.execute("UPDATE meta SET v = v + ? WHERE k = 'total'", (size - (old[0] if old else 0),))
        db.execute("UPDATE meta SET v = v + 1 WHERE k = 'writes'")
        writes = db.execute("SELECT v FROM meta WHERE k = 'writes'").fetchone()[0]
        if writes > _SWEEP_EVERY and writes > db.execute("SELECT count(*) FROM entries").fetchone()[0]:
            self._sweep(db)
        self._evict(db, cap, name)

    def _evict(self, db: sqlite3.Connection, cap: int, keep: str | None) -> None:
        total = db.execute("SELECT v FROM meta WHERE k = 'total'").fetchone()[0]
        while total > cap:
            rows = db.execute("SELECT name, size FROM entries WHERE name IS NOT ? ORDER BY used LIMIT 64",
                              (keep,)).fetchall()
            if not rows:
                break
            for name, size in rows:
                try:
                    os.unlink(name, dir_fd=self.fd)  # a name inside our folder: a link is removed, not followed
                except OSError:  # gone already, or not ours to remove: forgotten either way
                    pass
                db.execute("DELETE FROM entries WHERE name = ?", (name,))
                total -= size
                if total <= cap:
                    break
        db.execute("UPDATE meta SET v = ? WHERE k = 'total'", (total,))


def open_store(root: Path, version: str) -> Store:
    """The checked cache at ``root``; raises ``Refused`` (why) or ``OSError`` (it cannot be made)."""
    return Store(root, version)
