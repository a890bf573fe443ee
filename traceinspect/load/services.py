"""What the load stage is handed, never imports: the worker processes it decodes in and the column cache it reads.

The caller (``run/``) provides both, the way an HTTP client is handed its transport: ``load`` asks a ``Workers``
for a pool of processes and a ``ColumnCache`` for a file's columns, and knows nothing of how either is made. Left
out, decoding runs in this process and nothing is cached: the columns are the same either way.
"""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

ProgressFn = Callable[[str, int, int], None]  # (file, bytes done in this call, total bytes of all files)


@dataclass
class FileResult:
    """One trace file's decoded columns (``load/files.py``), what a ``ColumnCache`` holds."""

    path: str
    meta: dict
    columns: dict  # column name -> np.ndarray, or list for a text column read from the cache
    nbytes: int


class Workers(Protocol):
    """Where a stage runs in parallel: ``count`` processes at most; ``pool(n)`` starts an executor of ``n`` (a
    context manager that stops them); ``can_fork()``: workers may start here by forking this process (they see
    its memory, copy-on-write); ``started``: pieces of files already decoding (``load/prefetch.py``), or None."""

    count: int
    started: object | None  # load.prefetch.Started

    def pool(self, n: int) -> Executor: ...

    def can_fork(self) -> bool: ...


class ColumnCache(Protocol):
    """Decoded columns per trace file, keyed by the file (path, size, mtime); ``get`` is None on a miss."""

    def get(self, path: Path) -> FileResult | None: ...

    def put(self, path: Path, result: FileResult) -> None: ...

    def has(self, path: Path) -> bool: ...


class InProcess:
    """No worker processes: everything runs in this process, one thing at a time."""

    count = 1
    started = None

    def pool(self, n: int) -> Executor:
        raise RuntimeError("no worker processes were handed in")

    def can_fork(self) -> bool:
        return False


IN_PROCESS = InProcess()
