"""The caches: decoded columns per trace file, a rank's analysis, a whole report. Nothing in them is ever executed.

**Where**: one folder, ``--cache-dir`` (``Config.cache_dir``) if given, else ``$TRACEINSPECT_CACHE_DIR``, else the
user cache folder (``platformdirs.user_cache_dir("traceinspect")``, e.g. ``~/.cache/traceinspect``). Nothing is
written under the trace folder unless ``--cache-dir`` points there: trace folders are shared, copied and attached to
bug reports, and a report must leave them as they were.

**What**: tables as Parquet (Arrow), everything else as msgspec JSON decoded into fixed types. No Python object
serialization: a cache entry is data, so a crafted file is at worst a miss. A Parquet file whose schema holds an
Arrow extension type (the one Arrow type that can carry Python objects) is refused before it reaches pandas.

**Keys**: the trace files' absolute paths, sizes and modification times; the settings that change results; the
code (a hash of the decoder's source for columns, of the package's files for results). A changed input is a miss.

**Size**: at most ``Config.cache_max_bytes``; after each write the least recently used entries go first.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
from pathlib import Path
from typing import Any

import msgspec

from ..config import Config

FORMAT = 3  # bump when an entry's layout changes: older entries are then simply never looked up
ENV = "TRACEINSPECT_CACHE_DIR"
_META = b"traceinspect"  # the Parquet schema metadata key holding a column entry's JSON side


def cache_root(config: Config) -> Path:
    """The one cache folder (see the module docstring for the order)."""
    if config.cache_dir:
        return Path(config.cache_dir)
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("traceinspect", appauthor=False))


def _dir(config: Config) -> Path:
    return cache_root(config) / f"v{FORMAT}"


# --------------------------------------------------------------------------------------------------------------
# Keys


def _decoder_version() -> str:
    """Cached columns are only valid for the decoder that made them: a hash of its sources."""
    global _DECODER
    if _DECODER is None:
        load = Path(__file__).parents[1] / "load"
        src = b"".join((load / name).read_bytes() for name in ("decode.py", "columns.py", "layout.py", "compressed.py"))
        _DECODER = hashlib.sha1(src).hexdigest()[:12]
    return _DECODER


_DECODER: str | None = None


def _key(path: Path) -> str:
    st = path.stat()
    raw = f"{FORMAT}|{_decoder_version()}|{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    return hashlib.sha1(raw.encode()).hexdigest()[:20]


def _code_version() -> str:
    """Changes whenever the package's code changes (a hash of its source files' sizes and mtimes)."""
    global _CODE
    if _CODE is None:
        pkg = Path(__file__).parents[1]
        h = hashlib.sha1()
        for f in sorted(pkg.rglob("*.py")):
            st = f.stat()
            h.update(f"{f.relative_to(pkg)}|{st.st_size}|{st.st_mtime_ns}".encode())
        _CODE = h.hexdigest()[:12]
    return _CODE


_CODE: str | None = None

# Settings that change where or how fast, never what: not part of a result's key.
_NOT_IN_KEY = ("workers", "use_cache", "cache_dir", "cache_max_bytes", "executor", "scheduler")


def result_key(kind: str, files: list, config: Config) -> str | None:
    try:
        parts = [kind, _code_version(), repr(sorted((k, v) for k, v in config.__dict__.items()
                                                   if k not in _NOT_IN_KEY))]
        # The paths as given go into the key too: the results name their files (and the report its source) as the
        # user spelled them, so the same files reached from another folder are another entry, never stale names.
        parts += [f"{f}|{_key(Path(f))}" for f in sorted(map(str, files))]
    except OSError:
        return None
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:24]


# --------------------------------------------------------------------------------------------------------------
# Files: atomic writes, reads that touch (for LRU), eviction


_TAG = b"Signature: 8a477f597d28d172789f06886806bc55\n# traceinspect's cache (https://bford.info/cachedir/)\n"


def _write(config: Config, name: str, data: bytes) -> None:
    d = _dir(config)
    try:
        d.mkdir(parents=True, exist_ok=True)
        tag = cache_root(config) / "CACHEDIR.TAG"
        if not tag.exists():
            tag.write_bytes(_TAG)
        with tempfile.NamedTemporaryFile(dir=d, prefix=".", suffix=".tmp", delete=False) as tmp:
            tmp.write(data)
        os.replace(tmp.name, d / name)
    except OSError:  # a cache that cannot be written is no cache; the report does not depend on it
        return
    evict(config)


def _read(config: Config, name: str) -> bytes | None:
    p = _dir(config) / name
    try:
        data = p.read_bytes()
        os.utime(p)  # recently used: evicted last
    except OSError:
        return None
    return data


def evict(config: Config) -> None:
    """Delete the least recently used entries until the folder holds at most ``cache_max_bytes``."""
    d = _dir(config)
    try:
        entries = [(e.stat().st_mtime_ns, e.stat().st_size, e) for e in d.iterdir() if e.is_file()]
    except OSError:
        return
    total = sum(size for _, size, _ in entries)
    for _, size, e in sorted(entries, key=lambda t: t[0]):
        if total <= config.cache_max_bytes:
            break
        try:
            e.unlink()
            total -= size
        except OSError:
            pass


# --------------------------------------------------------------------------------------------------------------
# Tables <-> Parquet bytes


def _safe_table(data: bytes):
    """Parquet bytes -> an Arrow table, refused when a column has an extension type (those can carry Python objects)."""
    import pyarrow as pa
    import pyarrow.parquet as papq

    table = papq.read_table(io.BytesIO(data))
    for field in table.schema:
        if isinstance(field.type, pa.ExtensionType):
            raise ValueError(f"column {field.name}: extension type refused")
    return table


def _frame_bytes(df) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as papq

    buf = io.BytesIO()
    papq.write_table(pa.Table.from_pandas(df), buf, compression="zstd")
    return buf.getvalue()


def _frame(data: bytes):
    return _safe_table(data).to_pandas()


# --------------------------------------------------------------------------------------------------------------
# Decoded columns of one trace file


class _ColumnsMeta(msgspec.Struct):
    meta: dict[str, Any]
    bytes: int
    file: str


def has_columns(path: Path, config: Config) -> bool:
    """An entry of ``path``'s columns exists (without reading it)."""
    try:
        return (_dir(config) / f"cols-{_key(path)}.parquet").exists()
    except OSError:
        return False


def get(path: Path, config: Config):
    import numpy as np

    from ..load.decode import NUM_COLS, RAW_COLS, STR_COLS
    from ..load.files import FileResult

    try:
        key = _key(path)
    except OSError:
        return None
    data = _read(config, f"cols-{key}.parquet")
    if data is None:
        return None
    try:
        table = _safe_table(data)
        info = msgspec.json.decode(table.schema.metadata[_META], type=_ColumnsMeta)
        cols: dict = {"n": table.num_rows}
        for c in NUM_COLS:
            cols[c] = table.column(c).to_numpy()
        for c in STR_COLS:
            arr = table.column(c).combine_chunks()
            codes = arr.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int32)
            cols[c] = (codes, arr.dictionary.to_pylist())
        for c in RAW_COLS:
            cols[c] = table.column(c).to_pylist() if c in table.column_names else None
    except Exception:  # a damaged or foreign entry is a miss, never an error
        return None
    return FileResult(path=str(path), meta=info.meta, columns=cols, nbytes=info.bytes)


def put(path: Path, result, config: Config) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as papq

    from ..load.decode import NUM_COLS, RAW_COLS, STR_COLS

    try:
        key = _key(path)
    except OSError:
        return
    cols = result.columns
    arrays = {c: pa.array(cols[c]) for c in NUM_COLS}
    for c in STR_COLS:
        codes, strings = cols[c]
        mask = codes < 0
        arrays[c] = pa.DictionaryArray.from_arrays(
            pa.array(np.where(mask, 0, codes), type=pa.int32(), mask=mask), pa.array(strings, type=pa.string())
        )
    for c in RAW_COLS:
        if cols[c] is not None:
            arrays[c] = pa.array(cols[c], type=pa.string())
    info = msgspec.json.encode(_ColumnsMeta(meta=result.meta, bytes=result.nbytes, file=str(path)))
    table = pa.table(arrays).replace_schema_metadata({_META: info})
    buf = io.BytesIO()
    papq.write_table(table, buf, compression="zstd")
    _write(config, f"cols-{key}.parquet", buf.getvalue())


# --------------------------------------------------------------------------------------------------------------
# A rank's analysis: its scalar fields as JSON, its step table and tables as Parquet inside the same JSON entry


class _RankEntry(msgspec.Struct):
    fields: dict[str, Any]
    steps: bytes
    tables: dict[str, bytes]
    skipped: list[tuple[str, str]] = []


class _RankTaskEntry(msgspec.Struct):
    ranks: list[_RankEntry]
    skipped: list[tuple[str, str]]


def _rank_to_entry(ra) -> _RankEntry:
    fields = {k: v for k, v in ra.__dict__.items() if k not in ("steps", "tables")}
    return _RankEntry(fields=fields, steps=_frame_bytes(ra.steps),
                      tables={name: _frame_bytes(t) for name, t in ra.tables.items()})


def _rank_from_entry(e: _RankEntry):
    from ..analyze.results import RankAnalysis

    fields = dict(e.fields)
    cc = fields.get("compute_capability")
    fields["compute_capability"] = tuple(cc) if cc is not None else None
    if fields.get("setup") is not None:
        from ..analyze.setup import Setup

        fields["setup"] = msgspec.convert(fields["setup"], Setup)
    return RankAnalysis(**fields, steps=_frame(e.steps), tables={k: _frame(v) for k, v in e.tables.items()})


def get_rank_result(key: str | None, config: Config):
    """``(ranks, skipped)`` of one rank task, or None."""
    from ..load.trace import Skipped

    if key is None:
        return None
    data = _read(config, f"rank-{key}.json")
    if data is None:
        return None
    try:
        entry = msgspec.json.decode(data, type=_RankTaskEntry)
        return [_rank_from_entry(e) for e in entry.ranks], [Skipped(file=f, reason=r) for f, r in entry.skipped]
    except Exception:  # a damaged or foreign entry is a miss
        return None


def put_rank_result(key: str | None, result, config: Config) -> None:
    if key is None:
        return
    ranks, skipped = result
    try:
        entry = _RankTaskEntry(ranks=[_rank_to_entry(ra) for ra in ranks], skipped=[(s.file, s.reason) for s in skipped])
        data = msgspec.json.encode(entry)
    except Exception:  # a table Arrow cannot hold (mixed object column): not cached, still correct
        return
    _write(config, f"rank-{key}.json", data)


# --------------------------------------------------------------------------------------------------------------
# A whole report: its JSON document (standard library + msgspec only: a cached re-report imports no pandas)


def get_report(key: str | None, config: Config):
    """The cached ``ReportDoc``, or None."""
    if key is None:
        return None
    data = _read(config, f"report-{key}.json")
    if data is None:
        return None
    from ..report.doc import ReportDoc

    try:
        return msgspec.json.decode(data, type=ReportDoc)
    except msgspec.MsgspecError:
        return None


def put_report(key: str | None, doc, config: Config) -> None:
    if key is None:
        return
    _write(config, f"report-{key}.json", msgspec.json.encode(doc))
