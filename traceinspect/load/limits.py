"""What one trace file may cost while it is read: the limit fields of ``Config``, as the loader applies them.

A trace is data from elsewhere (a colleague, a cluster, a bug report): its size on disk, its compression and the
numbers in its metadata are not trusted to say how much memory reading it takes. Past a limit the file gets a
one-line reason naming the limit and the rest of the report goes on (docs/folders.md, "Limits").
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import DEFAULT
from ..errors import TraceFileError


class FinalFileError(TraceFileError):
    """A file no other way of reading can get past (past a limit, or bytes JSON never holds): the reader does not
    retry it whole."""

    def __reduce__(self):  # keeps its class across process boundaries
        return (type(self), (self.path, self.reason))


@dataclass(frozen=True)
class Limits:
    """The loader's copy of the limit fields of ``Config`` (small and picklable: it travels to worker processes)."""

    inflate_ratio: float  # Config.max_inflate_ratio
    inflate_floor: int  # Config.min_inflate_cap_bytes
    event_bytes: int  # Config.max_event_bytes
    world: int  # Config.max_world_size
    memory: int = 1 << 30  # Config.memory_limit_bytes
    spill_dir: str | None = None  # Config.spill_dir

    @classmethod
    def of(cls, config) -> "Limits":
        return cls(inflate_ratio=config.max_inflate_ratio, inflate_floor=config.min_inflate_cap_bytes,
                   event_bytes=config.max_event_bytes, world=config.max_world_size,
                   memory=config.memory_limit_bytes, spill_dir=config.spill_dir)

    def inflate_cap(self, size_on_disk: int) -> int:
        """Most decompressed bytes a compressed file of this size may hold."""
        return max(self.inflate_floor, int(self.inflate_ratio * size_on_disk))

    @property
    def spill_bytes(self) -> int:
        """Columns of one file held in memory at most before they go to disk (load/spill.py)."""
        return self.memory // 4

    def inflight(self, workers: int) -> int:
        """Pieces decoding at once, across every process: what the bound leaves after the spill threshold."""
        return max(1, min(2 * workers, (self.memory - self.spill_bytes) // PIECE_COST))


# What one piece in flight may cost while it is decoded: its text, the decoded structs and its columns (measured on
# 8 MB pieces: +28 MiB for an H200 capture with shapes and stacks, +13 MiB for the public A100 trace; the rest is
# room for pieces that run past 8 MB to the next event boundary).
PIECE_COST = 96 << 20


DEFAULT_LIMITS = Limits.of(DEFAULT)


def mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB" if n < 1e9 else f"{n / 1e9:,.2f} GB"


def no_nul(block: bytes, offset: int, path: str) -> None:
    """JSON text never holds a NUL byte (control characters are escaped in strings): a file that does is damaged,
    preallocated or sparse, and reading on would only read zeros."""
    at = block.find(b"\x00")
    if at >= 0:
        raise FinalFileError(path, f"not JSON text: a NUL byte at byte {offset + at:,} (a damaged, preallocated or "
                                   "sparse file)")
