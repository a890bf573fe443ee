"""A cache of decoded columns, so a second report of the same folder skips JSON entirely.

One Parquet file per trace file (columns as decoded) and its metadata as JSON, keyed by the trace's absolute path,
size and modification time: a changed file is decoded again. The cache lives in ``.traceinspect-cache`` inside the
trace folder, or in the user's cache folder when the trace folder is read-only, or in ``Config.cache_dir``.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from ..config import Config

FORMAT = 2


def _decoder_version() -> str:
    """Cached columns are only valid for the decoder that made them: a hash of its source."""
    global _DECODER
    if _DECODER is None:
        src = (Path(__file__).parents[1] / "load" / "decode.py").read_bytes()
        _DECODER = hashlib.sha1(src).hexdigest()[:12]
    return _DECODER


_DECODER: str | None = None


def _key(path: Path) -> str:
    st = path.stat()
    raw = f"{FORMAT}|{_decoder_version()}|{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    return hashlib.sha1(raw.encode()).hexdigest()[:20]


def _dirs(path: Path, config: Config) -> list[Path]:
    if config.cache_dir:
        return [Path(config.cache_dir)]
    user = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "traceinspect"
    return [path.parent / ".traceinspect-cache", user]


def get(path: Path, config: Config):
    import numpy as np

    from ..load.decode import NUM_COLS, RAW_COLS, STR_COLS
    from ..load.reader import FileResult

    try:
        key = _key(path)
    except OSError:
        return None
    for d in _dirs(path, config):
        pq, js = d / f"{key}.parquet", d / f"{key}.json"
        if pq.exists() and js.exists():
            try:
                import pyarrow.parquet as papq

                table = papq.read_table(pq)
                info = json.loads(js.read_text())
                cols: dict = {"n": table.num_rows}
                for c in NUM_COLS:
                    cols[c] = table.column(c).to_numpy()
                for c in STR_COLS:
                    arr = table.column(c).combine_chunks()
                    codes = arr.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int32)
                    cols[c] = (codes, arr.dictionary.to_pylist())
                for c in RAW_COLS:
                    cols[c] = table.column(c).to_pylist() if c in table.column_names else None
                return FileResult(path=str(path), meta=info["meta"], columns=cols, nbytes=info["bytes"])
            except Exception:  # a damaged cache entry is just a miss
                return None
    return None


def put(path: Path, result, config: Config) -> None:
    import numpy as np
    import pyarrow as pa

    from ..load.decode import NUM_COLS, RAW_COLS, STR_COLS
    import pyarrow.parquet as papq

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
    table = pa.table(arrays)
    for d in _dirs(path, config):
        try:
            d.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=d, suffix=".tmp", delete=False) as tmp:
                pass
            papq.write_table(table, tmp.name, compression="zstd")
            os.replace(tmp.name, d / f"{key}.parquet")
            (d / f"{key}.json").write_text(json.dumps({"meta": result.meta, "bytes": result.nbytes, "file": str(path)}))
            return
        except OSError:
            continue


# --------------------------------------------------------------------------------------------------------------
# Results cache: a rank's analysis (pickled RankAnalysis) and a whole report (its JSON dict), keyed by the files
# they came from (path, size, mtime), the configuration and the package version, so any change recomputes.


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


def result_key(kind: str, files: list, config: Config) -> str | None:
    try:
        parts = [kind, _code_version(), repr(sorted((k, v) for k, v in config.__dict__.items()
                                                   if k not in ("workers", "use_cache", "cache_dir")))]
        parts += [_key(Path(f)) for f in sorted(map(str, files))]
    except OSError:
        return None
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:24]


def get_result(anchor: Path, key: str | None, config: Config):
    if key is None:
        return None
    import pickle

    for d in _dirs(anchor, config):
        p = d / f"{key}.result.pkl"
        if p.exists():
            try:
                with open(p, "rb") as f:
                    return pickle.load(f)
            except Exception:  # a damaged entry is a miss
                return None
    return None


def put_result(anchor: Path, key: str | None, value, config: Config) -> None:
    if key is None:
        return
    import pickle

    for d in _dirs(anchor, config):
        try:
            d.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=d, suffix=".tmp", delete=False) as tmp:
                pickle.dump(value, tmp, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp.name, d / f"{key}.result.pkl")
            return
        except OSError:
            continue
