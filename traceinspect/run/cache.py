"""The caches: decoded columns per trace file, a rank's analysis, a whole report. Nothing in them is ever executed.

**Where**: one folder, ``--cache-dir`` (``RunOptions.cache_dir``) if given, else ``$TRACEINSPECT_CACHE_DIR``, else the
user cache folder (``platformdirs.user_cache_dir("traceinspect")``, e.g. ``~/.cache/traceinspect``). It must be the
user's own (``run/cache_store.py``: created ``0700``; a folder that is a link, another user's, group- or
world-writable, or that holds files and is not a traceinspect cache is refused with a one-line note and the report
runs without a cache). A cache folder inside (or equal to) the trace folder being reported is refused the same way:
trace folders are shared, copied and attached to bug reports, and a report leaves them as they were.

**What**: tables as Parquet (Arrow), everything else as msgspec JSON decoded into fixed types. No Python object
serialization: a cache entry is data, so a crafted file is at worst a miss. Every entry is sealed to its name
(``cache_store``): a file not written by this cache, or moved to another key, is a miss before it is parsed. Sizes
and row counts are checked against bounds derived from the source files before any table is read, and a Parquet
file whose schema holds an Arrow extension type (the one Arrow type that can carry Python objects) is refused.

**Keys**: each trace file's absolute path, device, inode, size, modification and change times (ns) and a hash of
its first, middle and last 64 KiB; the settings that change results; the code (a hash of the contents of every
source file the cached stage imports, found by walking the imports: ``code_digest``). A changed input is a miss.

**Size**: at most ``RunOptions.cache_max_bytes``; each write evicts the least recently used entries, from an index.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import re
import stat
import sys
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import msgspec

from ..config import RunOptions
from ..load.limits import Limits
from ..thresholds import Thresholds
from .cache_store import Refused, Store, closing_fd, open_store

FORMAT = 6  # bump when an entry's layout changes: older entries are then never looked up (their folder is removed)
ENV = "TRACEINSPECT_CACHE_DIR"
_META = b"traceinspect"  # the Parquet schema metadata key holding a column entry's JSON side
_PKG = Path(__file__).resolve().parents[1]
SAMPLE = 64 << 10  # bytes hashed at each of a trace file's start, middle and end
# Bounds of an entry, from its sources: a trace event takes at least this many bytes of JSON, and a compressed
# trace expands at most this much (deflate's limit is 1032:1).
MIN_EVENT_BYTES = 32
MAX_RATIO = 1100


def cache_root(options: RunOptions) -> Path:
    """The one cache folder (see the module docstring for the order)."""
    if options.cache_dir:
        return Path(options.cache_dir)
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("traceinspect", appauthor=False))


# --------------------------------------------------------------------------------------------------------------
# The folder: checked when opened (by ``checked`` at the start of every report); a refusal is one line on stderr,
# once per folder and reason. The open store is held for this process's later operations: everything in it goes
# through its folder descriptor, so the checked folder is the one used, whatever its path comes to name meanwhile.


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)


@functools.lru_cache(maxsize=64)
def _note(reason: str) -> None:
    print(f"traceinspect: cache not used: {_printable(reason)}; the report runs without it", file=sys.stderr)


# process id -> (root, the store open there): a forked worker opens its own (the parent's index connection is not
# its to use) and leaves the parent's untouched.
_OPEN: dict[int, tuple[Path, Store]] = {}


def _open(root: Path) -> Store:
    """The checked store at ``root``, opened now and held in place of the one held before (raises as
    ``open_store``; then none is held)."""
    held = _OPEN.pop(os.getpid(), None)
    if held is not None:
        held[1].close()
    store = open_store(root, f"v{FORMAT}")
    _OPEN[os.getpid()] = (root, store)
    return store


def _store(options: RunOptions) -> Store | None:
    root = cache_root(options)
    held = _OPEN.get(os.getpid())
    if held is not None and held[0] == root and held[1].usable():
        return held[1]
    try:
        return _open(root)
    except Refused as exc:
        _note(str(exc))
    except OSError as exc:
        _note(f"{root} cannot be made ({exc.strerror})")
    return None


def refusal(options: RunOptions, folder: str | os.PathLike | None = None) -> str | None:
    """Why the cache cannot be used (for a report of ``folder``), or None when it can."""
    root = cache_root(options)
    if folder is not None and os.path.exists(folder):  # a path that is not there is the report's own error
        trace = Path(folder).resolve()
        top = trace if trace.is_dir() else trace.parent
        where = root.resolve()
        if where == top or top in where.parents:
            return f"{root} is inside the trace folder {folder} (a report never writes there)"
    try:
        _open(root)  # checked afresh, and held for the report's entries
    except Refused as exc:
        return str(exc)
    except OSError as exc:
        return f"{root} cannot be made ({exc.strerror})"
    return None


def checked(options: RunOptions, folder: str | os.PathLike | None = None) -> RunOptions:
    """``options``, or a copy without the cache (and one line on stderr saying why) when the cache is refused."""
    if not options.use_cache:
        return options
    reason = refusal(options, folder)
    if reason is None:
        return options
    _note(reason)
    return replace(options, use_cache=False)


# --------------------------------------------------------------------------------------------------------------
# Keys


def identity(path: Path) -> str:
    """What tells this file's content apart: device, inode, size, mtime and ctime (ns), and a BLAKE2b of its first,
    middle and last ``SAMPLE`` bytes (a copy with the same size and mtime, ``cp -p``, ``rsync -t``, ``tar``, is
    another inode, a rewrite in place within the clock's resolution changes sampled bytes or the ctime)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO named like a trace does not block
    with closing_fd(fd):
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path}: not a regular file")
        h = hashlib.blake2b(digest_size=16)
        for offset in sorted({0, max(0, st.st_size // 2 - SAMPLE // 2), max(0, st.st_size - SAMPLE)}):
            h.update(os.pread(fd, SAMPLE, offset))
    return f"{st.st_dev}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{h.hexdigest()}"


def _modules(pkg: Path) -> dict[tuple[str, ...], Path]:
    """Dotted name (as parts, the package's own name left out) -> source file, for every module of ``pkg``."""
    out = {}
    for f in pkg.rglob("*.py"):
        parts = f.relative_to(pkg).with_suffix("").parts
        out[parts[:-1] if parts[-1] == "__init__" else parts] = f
    return out


# Import statements, read as text (faster than parsing; one inside a docstring only adds a file to the key).
_FROM = re.compile(r"^[ \t]*from[ \t]+(\.+[\w.]*|traceinspect\b[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#;]*)", re.M)
_IMPORT = re.compile(r"^[ \t]*import[ \t]+([^\n#;]*)", re.M)


def _imports(pkg: Path, f: Path, modules: dict[tuple[str, ...], Path]) -> set[Path]:
    """The package's own source files that ``f`` imports (anywhere in it, functions included)."""
    package = list(f.relative_to(pkg).parts[:-1])
    text = f.read_text(encoding="utf-8", errors="replace")
    targets: list[list[str]] = []
    for m in _IMPORT.finditer(text):
        names = [n.split()[0] for n in m.group(1).split(",") if n.strip()]
        targets += [n.split(".")[1:] for n in names if n.split(".")[0] == pkg.name]
    for m in _FROM.finditer(text):
        module, names = m.group(1), m.group(2).strip("() \n")
        dots = len(module) - len(module.lstrip("."))
        if dots:
            rest = module[dots:]
            base = package[: len(package) - dots + 1] + (rest.split(".") if rest else [])
        else:
            base = module.split(".")[1:]
        targets.append(base)
        targets += [base + [n.split()[0]] for n in names.replace("\n", " ").split(",") if n.split()]
    found: set[Path] = set()
    for t in targets:
        for i in range(len(t) + 1):  # importing a.b runs a/__init__.py first
            m = modules.get(tuple(t[:i]))
            if m is not None:
                found.add(m)
    return found


def _closure(pkg: Path, start: str, within: tuple[str, ...] | None) -> list[Path]:
    """Every module of the sub-package ``start``, every module they import, and so on; a package reached is taken
    whole (its modules may be loaded by name, as the rule registry does). With ``within``, imports are followed
    only into those sub-packages and the top-level modules (a stage's own layer and the ones below it)."""
    modules = _modules(pkg)
    key = {f: k for k, f in modules.items()}
    todo = [f for k, f in modules.items() if k[:1] == (start,)]
    seen: set[Path] = set()
    whole: set[tuple[str, ...]] = set()
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        for m in _imports(pkg, f, modules) - seen:
            k = key[m]
            if within is not None and m.parent != pkg and k[0] not in within:
                continue
            todo.append(m)
            if m.name == "__init__.py" and k and k not in whole:
                whole.add(k)
                todo += [g for j, g in modules.items() if j[:len(k)] == k]
    return sorted(seen)


def code_digest(start: str, within: tuple[str, ...] | None = None, pkg: Path = _PKG) -> str:
    """A hash of the contents of every source file of the stage ``start`` (a sub-package) and what it imports."""
    h = hashlib.blake2b(digest_size=12)
    for f in _closure(pkg, start, within):
        h.update(str(f.relative_to(pkg)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


_digest = functools.lru_cache(maxsize=None)(code_digest)  # the sources do not change while a process runs


def _key(path: Path) -> str:
    raw = f"{FORMAT}|{_digest('load', ('load',))}|{path.resolve()}|{identity(path)}"
    return hashlib.sha1(raw.encode()).hexdigest()[:20]


def result_key(kind: str, files: list, thresholds: Thresholds, limits: Limits, run: int | None) -> str | None:
    """The key of a result of these files: the settings that change what it says (every threshold and limit, and
    which run of the folder; how and where it runs, never), the code, and the files."""
    try:
        settings = [(f.name, getattr(part, f.name)) for part, cls in ((thresholds, Thresholds), (limits, Limits))
                    for f in fields(cls)]
        parts = [kind, _digest("run"), repr(sorted([*settings, ("run", run)]))]
        # The paths as given go into the key too: the results name their files (and the report its source) as the
        # user spelled them, so the same files reached from another folder are another entry, never stale names.
        parts += [f"{f}|{_key(Path(f))}" for f in sorted(map(str, files))]
        # What the sources can hold bounds the entry (``_limits``): it ends the key, so a reader given only the key
        # knows it, and the entry's seal covers its name.
        bound = _decoded_bound(files)
    except OSError:
        return None
    return f"{hashlib.sha1('|'.join(parts).encode()).hexdigest()[:24]}-{bound:x}"


def _decoded_bound(files) -> int:
    """The most bytes of JSON these trace files can hold: their sizes, times ``MAX_RATIO`` for compressed ones."""
    return sum(os.stat(f).st_size * (1 if str(f).endswith(".json") else MAX_RATIO) for f in files)


def _limits(decoded: int, options: RunOptions) -> tuple[int, int, int]:
    """(entry bytes, table rows, table bytes) that the entry of sources holding ``decoded`` bytes may reach."""
    rows = decoded // MIN_EVENT_BYTES + 1024
    return min(options.cache_max_bytes, 8 * decoded + (16 << 20)), rows, 256 * rows + 2 * decoded + (1 << 20)


def _key_bound(key: str) -> int:
    return int(key.rsplit("-", 1)[1], 16)


# --------------------------------------------------------------------------------------------------------------
# Files: through the checked store; any failure is a miss


def _write(options: RunOptions, name: str, data: bytes) -> None:
    store = _store(options)
    if store is None:
        return
    try:
        store.write(name, data, options.cache_max_bytes)
    except (OSError, Refused):  # a cache that cannot be written is no cache; the report does not depend on it
        pass


def _read(options: RunOptions, name: str, limit: int | None = None) -> memoryview | None:
    store = _store(options)
    if store is None:
        return None
    try:
        return store.read(name, options.cache_max_bytes if limit is None else limit)
    except (OSError, Refused):
        return None


def evict(options: RunOptions) -> None:
    """Delete the least recently used entries until the folder holds at most ``cache_max_bytes``."""
    store = _store(options)
    if store is not None:
        store.evict(options.cache_max_bytes)


# --------------------------------------------------------------------------------------------------------------
# Decoded columns of one trace file


class _ColumnsMeta(msgspec.Struct):
    meta: dict[str, Any]
    bytes: int
    file: str
    instants: int = 0  # rows of the file's memory instants, kept in their own entry (``_instants_name``)


def _cols_name(path: Path) -> str:
    return f"cols-{_key(path)}.parquet"


def _instants_name(path: Path) -> str:
    return f"inst-{_key(path)}.parquet"


def has_columns(path: Path, options: RunOptions) -> bool:
    """An entry of ``path``'s columns exists (without reading it)."""
    store = _store(options) if options.use_cache else None
    if store is None:
        return False
    try:
        return store.exists(_cols_name(path))
    except OSError:
        return False


def get(path: Path, options: RunOptions):
    from .cache_tables import columns_from_table, instants_from_table, safe_table

    try:
        name = _cols_name(path)
        limit, rows, nbytes = _limits(_decoded_bound([path]), options)
    except OSError:
        return None
    data = _read(options, name, limit)
    if data is None:
        return None
    try:
        table = safe_table(data, rows, nbytes)
        info = msgspec.json.decode(table.schema.metadata[_META], type=_ColumnsMeta)
        if info.file != str(path):  # an entry of another file: a miss
            return None
        result = columns_from_table(str(path), table, info.meta, info.bytes)
        if info.instants:  # the memory instants' entry must be there and hold as many rows, else a miss
            inst = _read(options, _instants_name(path), limit)
            if inst is None:
                return None
            result.columns["instants"] = instants_from_table(safe_table(inst, rows, nbytes), info.instants)
        return result
    except Exception:  # a damaged or foreign entry is a miss, never an error
        return None


def put(path: Path, result, options: RunOptions) -> None:
    from .cache_tables import columns_to_parquet, instants_to_parquet

    try:
        name = _cols_name(path)
    except OSError:
        return
    inst = result.columns.get("instants")
    rows = len(inst["ts"]) if inst is not None else 0
    if rows:  # written first: a columns entry that names instants finds them
        _write(options, _instants_name(path), instants_to_parquet(inst))
    info = msgspec.json.encode(_ColumnsMeta(meta=result.meta, bytes=result.nbytes, file=str(path), instants=rows))
    _write(options, name, columns_to_parquet(result.columns, {_META: info}))


# --------------------------------------------------------------------------------------------------------------
# A rank's analysis (its scalar fields as JSON, its step table and tables as Parquet inside the same JSON entry)
# and a whole report (its JSON document: standard library + msgspec only, so a cached re-report imports no pandas)


def get_rank_result(key: str | None, options: RunOptions):
    """``(ranks, skipped)`` of one rank task, or None."""
    from .cache_tables import rank_result_from_json

    if key is None:
        return None
    limit, rows, nbytes = _limits(_key_bound(key), options)
    data = _read(options, f"rank-{key}.json", limit)
    if data is None:
        return None
    try:
        return rank_result_from_json(data, rows, nbytes)
    except Exception:  # a damaged or foreign entry is a miss
        return None


def put_rank_result(key: str | None, result, options: RunOptions) -> None:
    from .cache_tables import rank_result_to_json

    if key is None:
        return
    try:
        data = rank_result_to_json(result)
    except Exception:  # a table Arrow cannot hold (mixed object column): not cached, still correct
        return
    _write(options, f"rank-{key}.json", data)


def get_report(key: str | None, options: RunOptions):
    """The cached ``ReportDoc``, or None."""
    if key is None:
        return None
    data = _read(options, f"report-{key}.msgpack", _limits(_key_bound(key), options)[0])
    if data is None:
        return None
    from ..report.doc import ReportDoc

    try:
        return msgspec.msgpack.decode(data, type=ReportDoc)
    except msgspec.MsgspecError:
        return None


def put_report(key: str | None, doc, options: RunOptions) -> None:
    """The report's document, as MessagePack (the same typed records as the JSON report: read back by msgspec into
    ``ReportDoc`` in a third of the time JSON takes, which a cached re-report of a big trace mostly is)."""
    if key is None:
        return
    _write(options, f"report-{key}.msgpack", msgspec.msgpack.encode(doc))
