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

import numpy as np

from .config import Config
from .decode import NUM_COLS, RAW_COLS, STR_COLS

FORMAT = 1


def _key(path: Path) -> str:
    st = path.stat()
    raw = f"{FORMAT}|{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    return hashlib.sha1(raw.encode()).hexdigest()[:20]


def _dirs(path: Path, config: Config) -> list[Path]:
    if config.cache_dir:
        return [Path(config.cache_dir)]
    user = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "traceinspect"
    return [path.parent / ".traceinspect-cache", user]


def get(path: Path, config: Config):
    from .load import FileResult

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
    import pyarrow as pa
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
