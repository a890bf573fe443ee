"""What a capture records about the job that a trace does not show: rank and world size, the DataLoader and DDP
settings, gradient accumulation, AMP dtype and loss scaling, written under the trace's ``"traceinspect"`` key.

Reads the objects it is given (loader, DDP model, scaler) by attribute only, so wrappers work; torch is imported
lazily and only for the process group. Imports nothing from the rest of traceinspect.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

#: Top-level key of the trace JSON that holds the capture metadata.
METADATA_KEY = "traceinspect"
#: Version tag of the metadata object, bumped when its fields change meaning.
METADATA_SCHEMA = "traceinspect.capture/1"


def detect_rank() -> tuple[int, int]:
    """(rank, world_size): from torch.distributed when initialized, else RANK/WORLD_SIZE, else (0, 1).

    Reading the process group first matters for launchers that do not export
    RANK (e.g. ``mp.spawn``); the environment covers profiling set up before
    ``init_process_group``.
    """
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except ImportError:  # pragma: no cover - torch without distributed
        pass

    def _env_int(name: str, default: int) -> int:
        try:
            return int(os.environ.get(name, default))
        except ValueError:
            return default

    return _env_int("RANK", 0), _env_int("WORLD_SIZE", 1)


def describe_dataloader(loader: Any) -> dict[str, Any] | None:
    """The DataLoader settings that decide input-pipeline stalls, read off the loader object.

    Returns None for None. Works with anything shaped like a
    ``torch.utils.data.DataLoader`` (missing attributes become None) so wrappers
    such as Accelerate's keep working.
    """
    if loader is None:
        return None
    batch_size = getattr(loader, "batch_size", None)
    if batch_size is None:  # a batch_sampler= loader keeps the size on the sampler
        batch_size = getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
    num_workers = getattr(loader, "num_workers", None)
    return {
        "num_workers": num_workers,
        "pin_memory": getattr(loader, "pin_memory", None),
        "persistent_workers": getattr(loader, "persistent_workers", None),
        # torch >= 2.0 stores None when num_workers == 0 (no prefetching happens)
        "prefetch_factor": getattr(loader, "prefetch_factor", None) if num_workers else None,
        "batch_size": batch_size,
        "drop_last": getattr(loader, "drop_last", None),
        "sampler": type(getattr(loader, "sampler", None)).__name__
        if getattr(loader, "sampler", None) is not None else None,
    }


def describe_ddp(model: Any) -> dict[str, Any] | None:
    """DDP's communication settings (bucket size, bucket view, static graph, unused params).

    None unless ``model`` is a DistributedDataParallel (recognized by its
    ``bucket_bytes_cap`` attribute, so subclasses and wrappers work too).
    """
    if model is None or not hasattr(model, "bucket_bytes_cap"):
        return None
    mb = 1024 * 1024
    first = getattr(model, "first_bucket_bytes_cap", None)
    return {
        "bucket_cap_mb": model.bucket_bytes_cap / mb,
        "first_bucket_cap_mb": first / mb if isinstance(first, (int, float)) else None,
        "gradient_as_bucket_view": bool(getattr(model, "gradient_as_bucket_view", False)),
        "static_graph": bool(getattr(model, "static_graph", False)),
        "find_unused_parameters": bool(getattr(model, "find_unused_parameters", False)),
    }


def amp_dtype_name(dtype: Any) -> str | None:
    """Normalize an autocast dtype (torch.dtype or string) to "bfloat16" / "float16" / None.

    Accepts the spellings people use on command lines ("bf16", "fp16", "half",
    "none"); anything else is kept as its string form rather than dropped.
    """
    if dtype is None or dtype is False:
        return None
    name = str(dtype).removeprefix("torch.").lower()
    aliases = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16",
               "float16": "float16", "half": "float16", "none": None, "": None,
               "fp32": None, "float32": None}
    return aliases.get(name, name)


def _grad_scaler_flag(scaler: Any) -> bool | None:
    """GradScaler object or bool -> whether loss scaling is on (None = not said)."""
    if scaler is None or isinstance(scaler, bool):
        return scaler
    is_enabled = getattr(scaler, "is_enabled", None)
    return bool(is_enabled()) if callable(is_enabled) else True


def _json_safe(obj: Any) -> Any:
    """Make ``extra``/``workload`` values JSON-encodable (dtypes, paths, devices -> str)."""
    if isinstance(obj, Mapping):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [_json_safe(v) for v in obj]
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else str(obj)
    return str(obj)


def describe_job(*, dataloader: Any = None, model: Any = None, accumulation_steps: int | None = None,
                 batch_size: int | None = None, no_sync: bool | None = None, amp_dtype: Any = None, grad_scaler: Any = None,
                 workload: Mapping[str, Any] | None = None, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The job settings of the metadata (None where not given)."""
    return {
        "dataloader": describe_dataloader(dataloader),
        "ddp": describe_ddp(model),
        "accumulation_steps": accumulation_steps,
        "batch_size": batch_size,  # samples per micro-batch on this rank, when the caller says (else the loader's)
        "no_sync": no_sync,
        "amp_dtype": amp_dtype_name(amp_dtype),
        "grad_scaler": _grad_scaler_flag(grad_scaler),
        "workload": _json_safe(dict(workload)) if workload is not None else None,
        "extra": _json_safe(dict(extra)) if extra is not None else None,
        "loader_probe": None,  # filled by the capture's probe_loader (loader_probe.py), if asked
        "loader_timing": None,  # the workers' batch times during the window (the same option)
        "cpu_count": _cpu_count(),  # cores this process may run on (what sizes a DataLoader's workers)
        "device_memory": describe_device_memory(),
    }


def describe_device_memory() -> dict[str, Any] | None:
    """What the trace cannot see of the device's memory: the free and total bytes the driver reports when the
    capture starts (the CUDA context, NCCL's buffers and other processes are the difference), and the caching
    allocator's settings (``PYTORCH_CUDA_ALLOC_CONF``). None without a CUDA device."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        free, total = torch.cuda.mem_get_info()
        return {"free_bytes": int(free), "total_bytes": int(total),
                "allocated_bytes": int(torch.cuda.memory_allocated()),
                "reserved_bytes": int(torch.cuda.memory_reserved()),
                "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF")}
    except (ImportError, RuntimeError):  # pragma: no cover - torch without CUDA support
        return None


def _cpu_count() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count()
