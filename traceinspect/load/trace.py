"""The loaded form of a run: one columnar table of events per rank, plus what the trace says about itself.

This is the only type the analyses read. Columns (one row per complete ``"ph": "X"`` event that an analysis can use):

========== ========= ===========================================================================================
column     dtype     meaning
========== ========= ===========================================================================================
kind       uint8     what the event is (``Kind``): CPU op, user annotation, runtime call, kernel, memcpy...
name       category  the event's name
pid, tid   int64     process / thread for CPU events; device / stream for GPU events (non-numeric ids: -1)
ts, dur    float64   start and duration in microseconds, on the rank's clock (``baseTimeNanoseconds`` applied,
                     so ranks align on ``RankTrace.base_ns / 1000 + ts``)
corr       int64     ``args.correlation`` (runtime call <-> GPU activity), -1 when absent
ext        int64     ``args["External id"]`` (or ``"external id"``): CPU op <-> runtime call / GPU activity
stream     int64     ``args.stream`` for GPU events
bytes      int64     ``args.bytes`` of memcpy / memset events
in_nelems  int64     ``args["In msg nelems"]`` of collectives
out_nelems int64     ``args["Out msg nelems"]``
group_size int64     ``args["Group size"]``
seq        int64     ``args["Seq"]`` (collective sequence number, newer torch)
dtype      category  ``args.dtype`` of collectives
coll       category  ``args["Collective name"]``
pg         category  ``args["Process Group Name"]``
in_dims    object    ``args["Input Dims"]`` as JSON text (only with ``record_shapes``), else None
in_types   object    ``args["Input type"]`` as JSON text, else None
in_concrete object   ``args["Concrete Inputs"]`` (scalar and list arguments: stride, is_causal...) as JSON text, else None
window     int16     index of the file (active window) of this rank the event came from
========== ========= ===========================================================================================

Integer columns use -1 for "absent".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # decoding (load/decode.py, load/columns.py) runs without pandas
    import pandas as pd


class Kind(IntEnum):
    CPU_OP = 0
    USER_ANNOTATION = 1
    GPU_ANNOTATION = 2
    RUNTIME = 3
    DRIVER = 4
    KERNEL = 5
    MEMCPY = 6
    MEMSET = 7


# Lower-cased trace category -> Kind. Everything else (flows, python_function, instant events...) is not kept.
CATEGORY_KIND = {
    "cpu_op": Kind.CPU_OP,
    "operator": Kind.CPU_OP,
    "user_annotation": Kind.USER_ANNOTATION,
    "gpu_user_annotation": Kind.GPU_ANNOTATION,
    "cuda_runtime": Kind.RUNTIME,
    "runtime": Kind.RUNTIME,
    "cuda_driver": Kind.DRIVER,
    "kernel": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY,
    "memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET,
    "memset": Kind.MEMSET,
}

GPU_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)

INT_COLUMNS = ("pid", "tid", "corr", "ext", "stream", "bytes", "in_nelems", "out_nelems", "group_size", "seq")
CAT_COLUMNS = ("name", "dtype", "coll", "pg")
TEXT_COLUMNS = ("in_dims", "in_types", "in_concrete")


@dataclass
class RankTrace:
    """One rank's events (all its active windows, in time order) and its metadata."""

    rank: int
    world_size: int | None
    files: list[str]
    events: pd.DataFrame
    base_ns: int = 0  # the rank's clock origin: absolute ns = base_ns + ts * 1000
    device_name: str | None = None
    compute_capability: tuple[int, int] | None = None
    distributed: dict = field(default_factory=dict)
    metadata: dict = field(default_factory=dict)  # traceinspect capture metadata ("traceinspect" key), if any
    windows: int = 1
    # Complete events of a category no analysis models (load/unmodelled.py): category -> count, over its windows.
    unmodelled: dict = field(default_factory=dict)
    # The allocator's memory events and failed allocations (load/instants.py), in time order; None when the trace
    # was recorded without profile_memory.
    instants: pd.DataFrame | None = None
    # Device id -> its memory in bytes (``deviceProperties[].totalGlobalMem``); empty where the trace has none.
    device_capacity: dict = field(default_factory=dict)

    @property
    def has_gpu(self) -> bool:
        return bool(self.events["kind"].isin([int(k) for k in GPU_KINDS]).any())


@dataclass
class Skipped:
    """A file (or a rank) that could not be analyzed, with the one-line reason."""

    file: str
    reason: str


@dataclass
class Trace:
    """A whole run: the ranks that loaded, and the files that did not."""

    source: str
    ranks: list[RankTrace]
    skipped: list[Skipped] = field(default_factory=list)
    world_size: int | None = None
    runs: dict | None = None  # the runs found where the files came from and which one this is (docs/folders.md)

    @property
    def missing_ranks(self) -> list[int]:
        """Ranks the world size promises but no usable file provided."""
        if not self.world_size:
            return []
        have = {r.rank for r in self.ranks}
        return [r for r in range(self.world_size) if r not in have]
