"""Cache entries as data: decoded columns and analysis tables as Parquet, a rank's fields as msgspec JSON.

A table is read only after its metadata (row count, bytes) is within the bounds its sources allow, and never when a
column has an Arrow extension type (the one Arrow type that can carry Python objects).
"""

from __future__ import annotations

import io
from typing import Any

import msgspec


class TooLarge(ValueError):
    """An entry's metadata claims more than its sources can hold."""


def safe_table(data, max_rows: int, max_bytes: int):
    """Parquet bytes -> an Arrow table, after the footer's row count and sizes are checked against the bounds;
    refused when a column has an extension type."""
    import pyarrow as pa
    import pyarrow.parquet as papq

    pf = papq.ParquetFile(pa.BufferReader(data))
    md = pf.metadata
    if md.num_rows > max_rows:
        raise TooLarge(f"{md.num_rows} rows > {max_rows}")
    size = sum(md.row_group(i).column(j).total_uncompressed_size
               for i in range(md.num_row_groups) for j in range(md.num_columns))
    if size > max_bytes:
        raise TooLarge(f"{size} bytes > {max_bytes}")
    for field in pf.schema_arrow:
        if isinstance(field.type, pa.ExtensionType):
            raise ValueError(f"column {field.name}: extension type refused")
    return pf.read()


def _parquet(table) -> bytes:
    import pyarrow.parquet as papq

    buf = io.BytesIO()
    papq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


# --------------------------------------------------------------------------------------------------------------
# Decoded columns of one trace file


def columns_to_parquet(cols: dict, metadata: dict) -> bytes:
    import numpy as np
    import pyarrow as pa

    from ..load.decode import NUM_COLS, RAW_COLS, STR_COLS

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
    unmodelled = msgspec.json.encode(cols.get("unmodelled") or {})  # counts of the events not kept (load/unmodelled.py)
    return _parquet(pa.table(arrays).replace_schema_metadata({**metadata, _UNMODELLED: unmodelled}))


_UNMODELLED = b"unmodelled"


def columns_from_table(path: str, table, meta: dict, nbytes: int):
    import numpy as np

    from ..load.decode import NUM_COLS, RAW_COLS, STR_COLS
    from ..load.files import FileResult

    cols: dict = {"n": table.num_rows}
    cols["unmodelled"] = msgspec.json.decode(table.schema.metadata[_UNMODELLED], type=dict[str, int])
    for c in NUM_COLS:
        cols[c] = table.column(c).to_numpy()
    for c in STR_COLS:
        arr = table.column(c).combine_chunks()
        codes = arr.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int32)
        cols[c] = (codes, arr.dictionary.to_pylist())
    for c in RAW_COLS:
        cols[c] = table.column(c).to_pylist() if c in table.column_names else None
    return FileResult(path=path, meta=meta, columns=cols, nbytes=nbytes)


def instants_to_parquet(inst: dict) -> bytes:
    import pyarrow as pa

    from ..load.instants import INSTANT_COLS

    return _parquet(pa.table({c: pa.array(inst[c]) for c in INSTANT_COLS}))


def instants_from_table(table, rows: int) -> dict:
    """The memory instants' columns of their entry; an entry of another length or other columns raises (a miss)."""
    from ..load.instants import INSTANT_COLS

    if table.num_rows != rows or set(table.column_names) != set(INSTANT_COLS):
        raise ValueError("memory instants entry does not match its columns entry")
    return {c: table.column(c).to_numpy() for c in INSTANT_COLS}


# --------------------------------------------------------------------------------------------------------------
# A rank's analysis: its scalar fields as JSON, its step table and tables as Parquet inside the same JSON entry


class _RankEntry(msgspec.Struct):
    fields: dict[str, Any]
    steps: bytes
    tables: dict[str, bytes]


class _RankTaskEntry(msgspec.Struct):
    ranks: list[_RankEntry]
    skipped: list[tuple[str, str]]


def _frame_bytes(df) -> bytes:
    import pyarrow as pa

    return _parquet(pa.Table.from_pandas(df))


def rank_result_to_json(result) -> bytes:
    ranks, skipped = result
    entries = [_RankEntry(fields={k: v for k, v in ra.__dict__.items() if k not in ("steps", "tables")},
                          steps=_frame_bytes(ra.steps), tables={n: _frame_bytes(t) for n, t in ra.tables.items()})
               for ra in ranks]
    return msgspec.json.encode(_RankTaskEntry(ranks=entries, skipped=[(s.file, s.reason) for s in skipped]))


def rank_result_from_json(data, max_rows: int, max_bytes: int):
    from ..analyze.results import RankAnalysis
    from ..load.trace import Skipped

    frame = lambda b: safe_table(b, max_rows, max_bytes).to_pandas()  # noqa: E731
    entry = msgspec.json.decode(data, type=_RankTaskEntry)
    ranks = []
    for e in entry.ranks:
        fields = dict(e.fields)
        cc = fields.get("compute_capability")
        fields["compute_capability"] = tuple(cc) if cc is not None else None
        if fields.get("setup") is not None:  # the setup record (analyze/setup.py), back to its frozen type
            from ..analyze.setup import Setup

            fields["setup"] = msgspec.convert(fields["setup"], Setup)
        ranks.append(RankAnalysis(**fields, steps=frame(e.steps), tables={k: frame(v) for k, v in e.tables.items()}))
    return ranks, [Skipped(file=f, reason=r) for f, r in entry.skipped]
