"""What one trace file may cost while it is read, and what reading the traces may hold: the loader's settings, the
only ones the load stage is handed (``Limits``).

A trace is data from elsewhere (a colleague, a cluster, a bug report): its size on disk, its compression and the
numbers in its metadata are not trusted to say how much memory reading it takes. Past a limit the file gets a
one-line reason naming the limit and the rest of the report goes on (docs/folders.md, "Limits").
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import TraceFileError


class FinalFileError(TraceFileError):
    """A file no other way of reading can get past (past a limit, or bytes JSON never holds): the reader does not
    retry it whole."""

    def __reduce__(self):  # keeps its class across process boundaries
        return (type(self), (self.path, self.reason))


@dataclass(frozen=True)
class Limits:
    """The limits (docs/folders.md, "Limits" and "Memory"); small and picklable: it travels to worker processes.
    They are no ``--set`` threshold: raise one with ``Config(...)`` in the Python API."""

    # --- limits: what one trace file may cost (docs/folders.md, "Limits") --------------------------------------
    # A file past a limit is skipped with a one-line reason naming the limit; the other files still report.
    # A compressed trace may inflate to at most this many times its size on disk. Kineto's JSON compresses 10-25x
    # (46x the most repetitive capture in fixtures/, a CUDA-graph replay); a gzip of whitespace or of one event
    # repeated reaches ~1000x: a decompression bomb, which would otherwise cost memory without bound.
    max_inflate_ratio: float = 200.0
    # ... but any compressed file may inflate to this many bytes (a small file's ratio says little).
    min_inflate_cap_bytes: int = 64 << 20
    # Text without an event boundary (one event, or what follows the last one) past this many bytes stops a file
    # read in pieces: the largest events are a few MB (a kernel name of a MB is hostile already); beyond that the
    # reader would hold text it cannot cut, however long.
    max_event_bytes: int = 64 << 20
    # A world size in a trace's metadata above this is implausible (the largest training jobs run on ~10^5
    # GPUs): it is read as unknown, with a one-line note, so missing ranks are never counted up to it.
    max_world_size: int = 1 << 20
    # --- memory: what reading the traces may hold (docs/folders.md, "Memory") ---------------------------------
    # Decoding keeps at most this many bytes of columns and pieces in flight, shared by every decoding process
    # (not a bound each): a file whose columns pass a quarter of it is spilled to unnamed files in spill_dir and
    # read back memory-mapped, so what a report holds of it does not grow with the file.
    memory_limit_bytes: int = 1 << 30
    # Where columns past the bound are spilled (None: the system's temporary folder); the files have no name and
    # vanish with the process.
    spill_dir: str | None = None

    def inflate_cap(self, size_on_disk: int) -> int:
        """Most decompressed bytes a compressed file of this size may hold."""
        return max(self.min_inflate_cap_bytes, int(self.max_inflate_ratio * size_on_disk))

    @property
    def spill_bytes(self) -> int:
        """Columns of one file held in memory at most before they go to disk (load/spill.py)."""
        return self.memory_limit_bytes // 4

    def inflight(self, workers: int) -> int:
        """Pieces decoding at once, across every process: what the bound leaves after the spill threshold."""
        return max(1, min(2 * workers, (self.memory_limit_bytes - self.spill_bytes) // PIECE_COST))


# What one piece in flight may cost while it is decoded: its text, the decoded structs and its columns (measured on
# 8 MB pieces: +28 MiB for an H200 capture with shapes and stacks, +13 MiB for the public A100 trace; the rest is
# room for pieces that run past 8 MB to the next event boundary).
PIECE_COST = 96 << 20


DEFAULT_LIMITS = Limits()


def mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB" if n < 1e9 else f"{n / 1e9:,.2f} GB"


def no_nul(block: bytes, offset: int, path: str) -> None:
    """JSON text never holds a NUL byte (control characters are escaped in strings): a file that does is damaged,
    preallocated or sparse, and reading on would only read zeros."""
    at = block.find(b"\x00")
    if at >= 0:
        raise FinalFileError(path, f"not JSON text: a NUL byte at byte {offset + at:,} (a damaged, preallocated or "
                                   "sparse file)")
