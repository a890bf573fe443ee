"""Names of collectives, sizes of dtypes and bus-bandwidth factors: the vocabulary the collectives table is built
from (``collectives.py``), with the parsers of the ``Input Dims`` / ``Input type`` texts that size a record.

Pure functions over strings; nothing here reads events. Definitions: docs/communication.md.
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache

import numpy as np

DTYPE_BYTES = {
    # record_param_comms / kernel "dtype" (c10::ScalarType names)
    "float": 4, "float32": 4, "half": 2, "float16": 2, "bfloat16": 2, "double": 8, "float64": 8,
    "int": 4, "int32": 4, "long": 8, "int64": 8, "short": 2, "int16": 2, "byte": 1, "uint8": 1, "char": 1,
    "int8": 1, "bool": 1, "uint16": 2, "uint32": 4, "uint64": 8, "complexfloat": 8, "complexdouble": 16,
    "complexhalf": 4, "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
    # "Input type" spellings (C++ type names)
    "c10::half": 2, "c10::bfloat16": 2, "long int": 8, "long long": 8, "int64_t": 8, "short int": 2,
    "unsigned char": 1, "signed char": 1, "int8_t": 1, "uint8_t": 1, "int32_t": 4, "c10::complex<float>": 8,
    "c10::complex<double>": 16, "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1,
    # NCCL kernel-name dtype tokens
    "f32": 4, "f16": 2, "bf16": 2, "f64": 8, "i32": 4, "u32": 4, "i64": 8, "u64": 8, "i8": 1, "u8": 1,
    "__nv_bfloat16": 2, "uint64_t": 8, "uint32_t": 4,
}

#: busbw = algbw x factor(n), as nccl-tests defines it (doc/PERFORMANCE.md there).
BUSBW_FACTOR = {
    "allreduce": lambda n: 2.0 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send": lambda n: 1.0,
    "recv": lambda n: 1.0,
}

NOT_COLLECTIVES = frozenset({"wait", "", "unknown"})

#: The kinds a collective is normalized to. A ``c10d::`` / ``_c10d_functional::`` op whose name is none of these
#: (``_c10d_functional::_wrap_tensor_autograd``, which wraps a result for autograd) moves no data: not a collective.
KINDS = ("allreduce", "allgather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "gather", "scatter",
         "send", "recv", "barrier")

#: Point-to-point transfers: between two ranks, not the whole group (never matched across ranks as a collective).
POINT_TO_POINT = frozenset({"send", "recv"})

#: The kinds each gloo work annotation can execute: gloo runs FSDP2's reduce-scatter (``_reduce_scatter_base_``)
#: as an all-reduce of the full input, so a ``gloo:all_reduce`` is a reduce-scatter's execution as well.
GLOO_EXECUTES = {"allreduce": ("allreduce", "reduce_scatter")}


def normalize_collective(name) -> str:
    """'c10d::allreduce_', 'nccl:all_reduce', '_allgather_base', 'AllReduce' ... -> 'allreduce', 'allgather'..."""
    if name is None or (isinstance(name, float) and math.isnan(name)):
        return "unknown"
    return _normalized(str(name))


@lru_cache(maxsize=1 << 12)
def _normalized(name: str) -> str:
    """``normalize_collective`` of a name (remembered: a trace names its collectives a few ways, tens of thousands
    of times)."""
    n = name.lower()
    for prefix in ("_c10d_functional::", "c10d_functional::", "c10d::", "nccl:", "gloo:", "rccl:", "ucc:", "mpi:"):
        if n.startswith(prefix):
            n = n[len(prefix):]
    n = n.strip("_").replace("_", "")
    if "reducescatter" in n:
        return "reduce_scatter"
    if "allreduce" in n:
        return "allreduce"
    if "allgather" in n:
        return "allgather"
    if "alltoall" in n or "sendrecv" in n:
        return "all_to_all"
    if "broadcast" in n:
        return "broadcast"
    if "barrier" in n:
        return "barrier"
    if n.startswith("reduce"):
        return "reduce"
    if n.startswith("gather"):
        return "gather"
    if n.startswith("scatter"):
        return "scatter"
    if n.startswith("send"):
        return "send"
    if n.startswith("recv"):
        return "recv"
    if n.startswith("wait"):
        return "wait"
    return n or "unknown"


_KERNEL_RE = re.compile(r"^(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)")


def kernel_collective(kernel_name: str) -> str:
    """'ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)' / 'ncclKernel_AllReduce_RING_LL_Sum_float(...)' -> 'allreduce'."""
    m = _KERNEL_RE.match(kernel_name or "")
    return normalize_collective(m.group(1)) if m else "unknown"


def dtype_bytes(dtype) -> int:
    if dtype is None or (isinstance(dtype, float) and math.isnan(dtype)):
        return -1
    return DTYPE_BYTES.get(str(dtype).strip().lower(), -1)


def busbw_factor(name: str, n) -> float:
    f = BUSBW_FACTOR.get(name)
    if f is None or n is None or not n or n < 1 or (isinstance(n, float) and math.isnan(n)):
        return float("nan")
    return float(f(int(n)))


def is_collective_op(name: str) -> bool:
    """A ``c10d::`` / ``_c10d_functional::`` op that is a collective: its normalized name is one of ``KINDS``, and
    it is not a wait on one (a name holding ``wait``)."""
    return normalize_collective(name) in KINDS and "wait" not in name


def input_argument(op_name: str, kind: str) -> int:
    """Which argument of the issuing op is the collective's input buffer: ``c10d::`` reduce-scatters take
    ``(output, input, ...)`` and are sized by their full input (docs/communication.md); everything else by its
    first argument (all-gather's gathered output, the functional collectives' input)."""
    return 1 if kind == "reduce_scatter" and str(op_name).startswith("c10d::") else 0


def _dims_nelems(text, arg: int = 0) -> int:
    """Elements of argument ``arg`` (the first by default) of an ``Input Dims`` JSON text ([[8, 1024]] or a
    TensorList [[[16770]]])."""
    if not isinstance(text, (str, bytes)) or not text:
        return -1
    try:
        dims = json.loads(text)
    except ValueError:
        return -1
    if not isinstance(dims, list) or len(dims) <= arg:
        return -1
    first = dims[arg]
    if not isinstance(first, list) or not first:
        return -1
    if all(isinstance(d, int) for d in first):
        return int(np.prod(first, dtype=np.int64))
    if all(isinstance(t, list) and all(isinstance(d, int) for d in t) for t in first):  # TensorList
        return int(sum(int(np.prod(t, dtype=np.int64)) for t in first if t))
    return -1


def _first_type(text):
    if not isinstance(text, (str, bytes)) or not text:
        return None
    try:
        types = json.loads(text)
    except ValueError:
        return None
    if isinstance(types, list) and types and isinstance(types[0], str) and types[0] and types[0] != "TensorList":
        return types[0]
    return None

