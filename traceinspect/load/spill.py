"""A file's columns gathered piece by piece, in memory while they are small and on disk past a bound.

A trace file is decoded in pieces of a few MB (``layout.py``); each piece's columns are handed to a ``ColumnSink``
as it is decoded, and dropped. While the file's columns are small they are kept and merged at the end, as they
always were. Past ``Limits.spill_bytes`` every column is appended to a file of its own instead (an unnamed
temporary file in ``Config.spill_dir``, removed by the system when the last reference goes, a crash included) and
the merged columns are memory maps of those files: their pages are read from disk when the analysis touches them
and the system can drop them again, so a column the analysis never reads costs nothing, and the bytes held in the
process's own memory no longer grow with the file. The columns are the same either way, value for value, in the
same order, with the same string tables.

Only the numeric columns and string codes are spilled; the shape text kept for matrix ops (``RAW_COLS``) stays in
memory (it is kept for a few kinds of operator only, ``columns.py``).
"""

from __future__ import annotations

import mmap
import tempfile

import numpy as np

from .columns import NUM_COLS, RAW_COLS, STR_COLS


class ColumnSink:
    """Pieces' columns in, one file's columns out (``finish``): the layout ``files._concat_pieces`` always made."""

    def __init__(self, spill_bytes: int | None, spill_dir: str | None = None):
        self.spill_bytes = spill_bytes  # None: never spill
        self.spill_dir = spill_dir or None
        self.pieces: list[dict] = []  # held in memory until the bound is passed
        self.held = 0
        self.files: dict[str, tuple] | None = None  # column -> (file, dtype) once spilled
        self.tables: dict[str, dict] = {c: {} for c in STR_COLS}
        self.raw: dict[str, list] = {c: [] for c in RAW_COLS}
        self.n = 0

    def add(self, piece: dict) -> None:
        if self.files is None:
            self.pieces.append(piece)
            self.held += sum(piece[c].nbytes for c in NUM_COLS) + sum(piece[c][0].nbytes for c in STR_COLS)
            if self.spill_bytes is not None and self.held > self.spill_bytes:
                self._start_spilling()
            return
        self._append(piece)

    def _start_spilling(self) -> None:
        self.files = {}
        for col in (*NUM_COLS, *STR_COLS):
            self.files[col] = (tempfile.TemporaryFile(dir=self.spill_dir), None)
        held, self.pieces, self.held = self.pieces, [], 0
        for p in held:
            self._append(p)

    def _append(self, piece: dict) -> None:
        for col in NUM_COLS:
            self._write(col, piece.pop(col))
        for col in STR_COLS:
            codes, strings = piece.pop(col)
            table = self.tables[col]
            remap = np.array([table.setdefault(s, len(table)) for s in strings] + [-1], dtype=np.int32)
            self._write(col, remap[codes])  # code -1 picks the trailing -1
        for col in RAW_COLS:
            self.raw[col].append((piece["n"], piece.pop(col)))
        self.n += piece["n"]

    def _write(self, col: str, arr: np.ndarray) -> None:
        f, dtype = self.files[col]
        if dtype is None:
            self.files[col] = (f, arr.dtype)
        elif arr.dtype != dtype:  # the decoders give every piece the same types; a mismatch is a bug here
            raise TypeError(f"column {col}: {arr.dtype} after {dtype}")
        f.write(np.ascontiguousarray(arr).data)

    def finish(self) -> dict:
        if self.files is None:
            from .files import _concat_pieces

            pieces, self.pieces = self.pieces, []
            return _concat_pieces(pieces)
        out: dict = {}
        for col in NUM_COLS:
            out[col] = _mapped(*self.files[col], self.n)
        for col in STR_COLS:
            out[col] = (_mapped(*self.files[col], self.n), list(self.tables[col]))
        for col in RAW_COLS:
            parts = self.raw[col]
            if any(a is not None for _, a in parts):
                out[col] = np.concatenate([a if a is not None else np.empty(n, object) for n, a in parts])
            else:
                out[col] = None
        out["n"] = self.n
        self.files = {}
        return out

    def close(self) -> None:
        for f, _ in (self.files or {}).values():
            f.close()
        self.files = None
        self.pieces = []


def _mapped(f, dtype, n: int) -> np.ndarray:
    """The column written to ``f`` as an array over a private map of it: read from the file page by page, and a
    write (no analysis writes its input; pandas may) lands in the process's own copy, never in the file."""
    f.flush()
    dtype = np.dtype(dtype if dtype is not None else np.float64)
    if n == 0 or dtype.itemsize * n == 0:
        f.close()
        return np.empty(0, dtype)
    mm = mmap.mmap(f.fileno(), dtype.itemsize * n, access=mmap.ACCESS_COPY)
    f.close()  # the map keeps the file's pages; the unnamed file goes when the map does
    return np.frombuffer(mm, dtype=dtype, count=n)

