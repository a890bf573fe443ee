"""A file's columns gathered piece by piece, in memory while they are small and on disk past a bound.

A trace file is decoded in pieces of a few MB (``layout.py``); each piece's columns are handed to a ``ColumnSink``
as it is decoded, and dropped. While the file's columns are small they are kept and merged at the end, as they
always were. Past ``Limits.spill_bytes`` (a quarter of ``Limits.memory_limit_bytes``) every column is appended to a
file of its own instead (an unnamed temporary file in ``Limits.spill_dir``, removed by the system when the last
reference goes, a crash included) and the merged columns are read-only memory maps of those files: a page is read
from the file when the analysis touches it, so a column the analysis never reads costs nothing, and the pages a
process holds are released again past half the bound (``_Trimmer``). The columns are the same either way, value
for value, in the same order, with the same string tables.

Only the numeric columns and string codes are spilled; the shape text kept for matrix ops (``RAW_COLS``) stays in
memory (it is kept for a few kinds of operator only, ``columns.py``).

A piece may hand over the columns made from a few distinct values (the process, the thread, the rarely present
arguments) as codes into those values (``columns.LOOKUPS``): the sink numbers each distinct tuple once for the
file, as it numbers strings, holds the codes, and makes the columns whole when it joins them (or writes them
whole to the spill files).
"""

from __future__ import annotations

import mmap
import os
import tempfile
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from . import instants as _instants
from .columns import LOOKUPS, NUM_COLS, RAW_COLS, STR_COLS, compacted, expanded
from .limits import Limits
from .unmodelled import merged


class ColumnSink:
    """Pieces' columns in, one file's columns out (``finish``): every column one array, each string column's codes
    numbered in order of first appearance in the file, with its table of strings."""

    def __init__(self, limits: Limits):
        self.spill_bytes = limits.spill_bytes
        self.spill_dir = limits.spill_dir or None
        # what a process may hold of the maps and the rest (``_Trimmer``)
        self.resident = limits.memory_limit_bytes // 2
        self.pieces: list[dict] = []  # held in memory until the bound is passed
        self.held = 0
        self.files: dict[str, tuple] | None = None  # column -> (file, dtype) once spilled
        self.tables: dict[str, dict] = {c: {} for c in STR_COLS}
        # columns handed over as codes (``columns.LOOKUPS``): per group of columns, its distinct value tuples
        self.lookups: dict[tuple, dict] = {}
        self.raw: dict[str, list] = {c: [] for c in RAW_COLS}
        self.unmodelled: list = []  # each piece's counts of events no analysis models (load/unmodelled.py)
        self.instants: list = []  # each piece's memory instants (load/instants.py), held: a few columns a row
        self.n = 0

    def add(self, piece: dict) -> None:
        if self.files is not None:
            expanded(piece)  # written whole to the spill files, from its own values
        elif LOOKUPS not in piece:
            compacted(piece)  # held as every held piece is: its lookup columns as codes
        self._unify(piece)
        self._unify_lookups(piece)
        # What stays in memory either way (a few columns, and only for some rows) is kept aside as it comes.
        for col in RAW_COLS:
            self.raw[col].append((piece["n"], piece.pop(col)))
        self.unmodelled.append(piece.pop("unmodelled", None))
        self.instants.append(piece.pop("instants", None))
        self.n += piece["n"]
        if self.files is None:
            self.pieces.append(piece)
            self.held += sum(piece[c].nbytes for c in (*NUM_COLS, *STR_COLS) if c in piece)
            self.held += sum(codes.nbytes for _, codes in piece[LOOKUPS])
            if self.held > self.spill_bytes:
                self._start_spilling()
            return
        self._append(piece)

    def _unify(self, piece: dict) -> None:
        """The piece's string codes renumbered onto the file's tables as it comes (each string numbered in order of
        first appearance in the file), so that finishing joins arrays only."""
        for col in STR_COLS:
            codes, strings = piece[col]
            table = self.tables[col]
            remap = np.array([table.setdefault(s, len(table)) for s in strings] + [-1], dtype=np.int32)
            piece[col] = remap[codes]  # code -1 picks the trailing -1

    def _unify_lookups(self, piece: dict) -> None:
        """The piece's lookup codes renumbered onto the file's tables of distinct values, as strings are; held as
        (columns, codes) until the columns are joined."""
        groups = []
        for codes, values in piece.pop(LOOKUPS, ()):
            cols = tuple(values)
            table = self.lookups.setdefault(cols, {})
            rows = zip(*(values[c].tolist() for c in cols))
            remap = np.array([table.setdefault(r, len(table)) for r in rows], dtype=np.int32)
            groups.append((cols, remap[codes]))
        piece[LOOKUPS] = groups

    def _values(self) -> dict[str, np.ndarray]:
        """Each looked-up column's distinct values, in code order."""
        out = {}
        for cols, table in self.lookups.items():
            rows = np.array(list(table), dtype=np.int64).reshape(len(table), len(cols))
            out.update({c: np.ascontiguousarray(rows[:, j]) for j, c in enumerate(cols)})
        return out

    def _start_spilling(self) -> None:
        _TRIM.budget = self.resident if _TRIM.budget is None else min(_TRIM.budget, self.resident)
        _LIBC.return_freed_memory()
        self.files = {}
        for col in (*NUM_COLS, *STR_COLS):
            self.files[col] = (tempfile.TemporaryFile(dir=self.spill_dir), None)
        held, self.pieces, self.held = self.pieces, [], 0
        values = self._values()
        for p in held:  # made whole from the file's values, as the spill files hold whole columns
            for cols, codes in p.pop(LOOKUPS):
                p.update({c: values[c][codes] for c in cols})
            self._append(p)

    def _append(self, piece: dict) -> None:
        for col in (*NUM_COLS, *STR_COLS):
            self._write(col, piece.pop(col))

    def _write(self, col: str, arr: np.ndarray) -> None:
        f, dtype = self.files[col]
        if dtype is None:
            self.files[col] = (f, arr.dtype)
        elif arr.dtype != dtype:  # the decoders give every piece the same types; a mismatch is a bug here
            raise TypeError(f"column {col}: {arr.dtype} after {dtype}")
        f.write(np.ascontiguousarray(arr).data)

    def finish(self) -> dict:
        """The file's columns: joined from the pieces held in memory (column by column, dropping each piece's copy
        as soon as it is joined: the peak is one file's columns plus one column), or mapped from the spill files."""
        out: dict = {}
        if self.files is None:
            pieces, self.pieces = self.pieces, []
            values, codes = self._values(), _joined_codes(pieces)

            def join(col: str, empty) -> np.ndarray:
                if not pieces:
                    return np.empty(0, empty)
                if col in codes:
                    return values[col][codes[col]]
                return np.concatenate([p.pop(col) for p in pieces])

            # Two columns at a time: numpy copies without the interpreter's lock, and each new column's pages are
            # the system's to fault in.
            cols = [(c, np.float64) for c in NUM_COLS] + [(c, np.int32) for c in STR_COLS]
            with ThreadPoolExecutor(2, thread_name_prefix="traceinspect-join") as pool:
                out.update(zip([c for c, _ in cols], pool.map(lambda ce: join(*ce), cols)))
            del codes
        else:
            for col in (*NUM_COLS, *STR_COLS):
                out[col] = _mapped(*self.files[col], self.n)
            self.files = {}
        for col in STR_COLS:
            out[col] = (out[col], list(self.tables[col]))
        for col in RAW_COLS:  # object arrays (None where no piece has any)
            parts, self.raw[col] = self.raw[col], []
            if any(a is not None for _, a in parts):
                out[col] = np.concatenate([a if a is not None else np.empty(n, object) for n, a in parts])
            else:
                out[col] = None
        out["n"] = self.n
        out["unmodelled"] = merged(self.unmodelled)
        out["instants"] = _instants.concat(self.instants)
        return out

    def close(self) -> None:
        for f, _ in (self.files or {}).values():
            f.close()
        self.files = None
        self.pieces = []


def _joined_codes(pieces: list[dict]) -> dict[str, np.ndarray]:
    """Column -> the file's codes of that looked-up column (every held piece hands them over as codes), each
    group's codes joined once."""
    out: dict = {}
    for i, (cols, _) in enumerate(pieces[0][LOOKUPS] if pieces else ()):
        joined = np.concatenate([p[LOOKUPS][i][1] for p in pieces])
        out.update(dict.fromkeys(cols, joined))
    return out


def _mapped(f, dtype, n: int) -> np.ndarray:
    """The column written to ``f`` as a read-only array over a map of it, read from the file page by page."""
    f.flush()
    dtype = np.dtype(dtype if dtype is not None else np.float64)
    if n == 0:
        f.close()
        return np.empty(0, dtype)
    mm = mmap.mmap(f.fileno(), dtype.itemsize * n, access=mmap.ACCESS_READ)
    f.close()  # the map keeps the file; the unnamed file goes when the map does
    _TRIM.watch(mm)
    return np.frombuffer(mm, dtype=dtype, count=n)


class _Trimmer:
    """Keeps the spilled columns' pages that this process holds mapped under a share of the bound.

    Pages of a map that the analysis touched stay in the process (and count in its resident set) until the system
    needs the memory. Every ``PERIOD`` seconds, once the process holds more than ``budget`` bytes, its maps are
    released (``madvise(MADV_DONTNEED)``: the pages leave the process, the file keeps them, and a page touched
    again is mapped again from the system's file cache). The maps are read-only, so nothing is lost."""

    PERIOD = 0.25

    def __init__(self):
        self.maps: list = []  # weak references: a map no column uses any more goes, with its file
        self.budget: int | None = None
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        os.register_at_fork(after_in_child=self._forked)

    def watch(self, mm) -> None:
        with self.lock:
            self.maps = [r for r in self.maps if r() is not None] + [weakref.ref(mm)]
            self._start()

    def _start(self) -> None:
        if self.budget is not None and self.thread is None:
            self.thread = threading.Thread(target=self._run, name="traceinspect-spill-trim", daemon=True)
            self.thread.start()

    def _forked(self) -> None:  # a forked worker holds its own pages of the maps: it trims them itself
        self.lock = threading.Lock()
        self.thread = None
        if self.maps:
            self._start()

    def _run(self) -> None:
        while self.trim() is not None:
            time.sleep(self.PERIOD)

    def trim(self, budget: int | None = None) -> int | None:
        """Release the maps' pages when the process holds more than ``budget`` (the bound's share); the bytes it
        held before, or None where the system does not say (not Linux: the system alone decides)."""
        with self.lock:
            maps = [m for m in (r() for r in self.maps) if m is not None]
        try:
            with open("/proc/self/statm", "rb") as fh:
                resident = int(fh.read().split()[1]) * _PAGE
        except OSError:
            return None
        if maps and resident > (self.budget if budget is None else budget):
            for mm in maps:
                try:
                    mm.madvise(mmap.MADV_DONTNEED)
                except (OSError, ValueError):  # closed meanwhile
                    pass
            _LIBC.trim()
        return resident


class _Libc:
    """The C allocator's two settings that decide whether freed arrays leave the process (glibc; elsewhere nothing).

    By default glibc serves a freed block of up to 32 MiB from its heap again instead of returning it: after the
    analyses of a big trace the process kept hundreds of MB of freed arrays (measured: +55 MiB a 900k-event rank,
    ten times that at 8.6 M events). Once a file spills, every block past ``MMAP_THRESHOLD`` gets pages of its own,
    returned when it is freed, and the trimmer hands back the heap's free top (``malloc_trim``)."""

    MMAP_THRESHOLD = 256 << 10  # bytes; glibc's own starting value is 128 KiB (it then grows it up to 32 MiB)
    _M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)

    def __init__(self):
        self.lib = None
        self.set = False

    def _load(self):
        if self.lib is None:
            try:
                import ctypes

                lib = ctypes.CDLL(None)
                self.lib = lib if hasattr(lib, "mallopt") and hasattr(lib, "malloc_trim") else False
            except (OSError, AttributeError):
                self.lib = False
        return self.lib

    def return_freed_memory(self) -> None:
        lib = self._load()
        if lib and not self.set:
            self.set = bool(lib.mallopt(self._M_MMAP_THRESHOLD, self.MMAP_THRESHOLD))

    def trim(self) -> None:
        lib = self._load()
        if lib:
            lib.malloc_trim(0)


_PAGE = os.sysconf("SC_PAGE_SIZE")
_LIBC = _Libc()
_TRIM = _Trimmer()

