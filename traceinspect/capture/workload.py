"""The reference DDP training step traceinspect captures: a "before" and an "after", every fix a knob.

Run one process per rank under torchrun (``traceinspect capture`` does this)::

    torchrun --standalone --nproc-per-node 2 -m traceinspect.capture.workload \\
        --preset baseline --out ./log/profile_ddp --set batch_size=8 --set num_workers=0

Why it exists: the analyzer's findings need traces where the cause is known.
``baseline`` is a correct but naive DDP loop (pageable host->device copies,
synchronous loader, tiny DDP buckets, gradient sync on every micro-batch, fp32,
per-parameter AdamW); ``optimized`` is the same loop with each fix applied
(pinned memory + non_blocking, persistent workers, 25 MB buckets, ``no_sync``
accumulation, no per-micro-batch ``loss.item()``, bf16 autocast, fused AdamW). The GPU-only fixes
(``GPU_ONLY``: autocast, pinning, non_blocking, TF32) stay off on CPU, where they do not pay (bf16
autocast on CPU is slower than fp32). Any single knob can be flipped with
``--set key=value`` to produce a trace that shows exactly one problem.

Runs on CPU (gloo) and CUDA (NCCL, one GPU per rank at ``cuda:LOCAL_RANK``).
One profiler step is one optimizer step, i.e. all its micro-batches.

torch is imported inside functions only, so the config part (presets, knob
parsing) works where torch is missing, e.g. for the CLI's up-front checks.
Imports nothing from traceinspect but :mod:`traceinspect.capture`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import os
import sys
import tempfile
import time
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import profiling as _capture

__all__ = ["WorkloadConfig", "KnobError", "PRESETS", "CHOICES", "preset_config", "parse_overrides",
           "apply_overrides", "knob_table", "run", "main"]


class KnobError(ValueError):
    """A ``--set key=value`` that names no knob, has the wrong type, or an invalid value."""


@dataclass
class WorkloadConfig:
    """Every setting of the reference workload; each field is a knob for ``--set key=value``.

    Values of 0 marked "auto" are resolved per device in :func:`resolve_auto`,
    so the same preset is sensibly sized on a laptop CPU and on a GPU.
    """

    # --- model ---------------------------------------------------------------------------
    model: str = "mlp"                 # mlp (1024->4096->2, ReLU) | transformer (small encoder) | deep (many small Linear layers)
    mlp_in: int = 1024                 # mlp: input features
    mlp_hidden: int = 4096             # mlp: hidden width (4096 -> ~4.2M params, 16 MB of fp32 gradients)
    d_model: int = 256                 # transformer: model width
    tf_layers: int = 4                 # transformer: nn.TransformerEncoderLayer count
    tf_heads: int = 4                  # transformer: attention heads
    seq_len: int = 128                 # transformer: tokens per sample
    vocab: int = 1000                  # transformer: token ids are drawn from [0, vocab)
    deep_layers: int = 48              # deep: Linear(deep_width, deep_width)+ReLU blocks (many small params, many DDP buckets)
    deep_width: int = 64               # deep: width of each block
    num_classes: int = 2               # output classes (labels are random integers in [0, num_classes))

    # --- data ----------------------------------------------------------------------------
    batch_size: int = 0                # per-rank micro-batch size; 0 = auto (256 on CUDA, 16 on CPU)
    num_workers: int = 2               # DataLoader worker processes per rank (0 = load in the training process)
    pin_memory: bool = False           # page-locked host batches (only takes effect with CUDA)
    persistent_workers: bool = False   # keep workers alive across epochs (needs num_workers > 0)
    prefetch_factor: int = 2           # batches each worker loads ahead (used only when num_workers > 0)
    non_blocking: bool = False         # .to(device, non_blocking=...) for inputs/labels (async only from pinned memory)
    item_delay_ms: float = 0.0         # sleep per __getitem__ (ms): simulates a slow decode/augment pipeline
    slow_rank: int = -1                # rank that gets item_delay_ms; -1 = every rank (a single slow rank makes stragglers)
    epoch_steps: int = 0               # optimizer steps per epoch (epoch ends restart non-persistent workers); 0 = one epoch for the whole run
    seed: int = 0                      # seeds the synthetic data, the model init and the sampler

    # --- DDP and the step ----------------------------------------------------------------
    bucket_cap_mb: float = 1.0         # DDP gradient bucket size in MB (tiny = many small all-reduces)
    gradient_as_bucket_view: bool = False  # DDP: gradients alias the bucket buffers (saves a copy and memory)
    static_graph: bool = False         # DDP: the graph is the same every step (enables some optimizations)
    find_unused_parameters: bool = False  # DDP: search the autograd graph for unused params every step (a cost when not needed)
    accum_steps: int = 4               # micro-batches per optimizer step (gradient accumulation)
    no_sync: bool = False              # run all micro-batches but the last under model.no_sync() (one all-reduce per step)
    amp: str = "none"                  # autocast dtype: none | bf16 | fp16 (torch.autocast, not torch.cuda.amp)
    grad_scaler: str = "auto"          # GradScaler: auto (only with fp16) | on (also with bf16: the mistake) | off
    clip_grad: float = 0.0             # clip_grad_norm_ max norm; 0 = no clipping
    optimizer_impl: str = "single"     # AdamW implementation: single (foreach=False, per-parameter) | foreach | fused
    lr: float = 1e-3                   # AdamW learning rate
    zero_grad_set_to_none: bool = False  # optimizer.zero_grad(set_to_none=...): False memsets every gradient
    tf32: bool = False                 # CUDA: TF32 matmuls (torch.set_float32_matmul_precision("high"))
    sync_loss: bool = False            # call loss.item() every micro-batch (a host<->device sync, like per-step logging)


#: Fields with a fixed set of values.
CHOICES: dict[str, tuple[str, ...]] = {
    "model": ("mlp", "transformer", "deep"),
    "amp": ("none", "bf16", "fp16"),
    "grad_scaler": ("auto", "on", "off"),
    "optimizer_impl": ("single", "foreach", "fused"),
}

#: Preset overrides of the dataclass defaults. Values may be callables of the
#: device context (cuda: bool, cpus_per_rank: int), resolved where the job runs.
PRESETS: dict[str, dict[str, Any]] = {
    # the "before": correct, but every default a first DDP script tends to have
    "baseline": {
        "num_workers": 2,
        "sync_loss": True,
        "pin_memory": False,
        "persistent_workers": False,
        "non_blocking": False,
        "bucket_cap_mb": 1.0,
        "amp": "none",
        "accum_steps": 4,
        "no_sync": False,
        "clip_grad": 0.0,
        "optimizer_impl": "single",
        "zero_grad_set_to_none": False,
        "tf32": False,
    },
    # the "after": the same loop with each fix applied
    "optimized": {
        # A worker needs a core of its own: on a CPU run with one core per rank it would take the core the step
        # runs on (the loader here is cheap), so there the batches load in the training process.
        "num_workers": lambda cuda, cpus: max(1, min(4, cpus)) if cuda else max(0, min(4, cpus - 1)),
        "pin_memory": lambda cuda, cpus: cuda,
        "persistent_workers": lambda cuda, cpus: cuda or cpus > 1,  # only where there are workers to keep
        "prefetch_factor": 2,
        "non_blocking": lambda cuda, cpus: cuda,
        "bucket_cap_mb": 25.0,
        "amp": lambda cuda, cpus: "bf16" if cuda else "none",
        "accum_steps": 4,
        "no_sync": True,
        "clip_grad": 1.0,
        "optimizer_impl": lambda cuda, cpus: "fused" if cuda else "foreach",
        "zero_grad_set_to_none": True,
        "tf32": lambda cuda, cpus: cuda,
        "sync_loss": False,
    },
}

#: Fixes that pay off only on a GPU, with the reason; the optimized preset leaves them as in the baseline on CPU
#: (bf16 autocast on CPU made the backward pass several times slower in our CPU demo, and there is no page-locked
#: memory, asynchronous copy or TF32 without CUDA). Every other knob the presets set applies on CPU and GPU.
GPU_ONLY: dict[str, str] = {
    "amp": "bf16 autocast: tensor cores on a GPU; on CPU it is usually slower than fp32",
    "pin_memory": "page-locked batches: only CUDA copies from them",
    "non_blocking": "asynchronous host->device copies: only from pinned memory to a GPU",
    "tf32": "TF32 matmuls: a GPU tensor-core mode",
}

#: What each knob the optimized preset changes buys, on both devices, for the demo's table.
WHY: dict[str, str] = {
    "num_workers": "as many loader workers as there are spare cores (none when the step has one core per rank)",
    "persistent_workers": "keep the workers between epochs",
    "bucket_cap_mb": "fewer, larger gradient all-reduces",
    "no_sync": "one all-reduce per optimizer step, not per micro-batch",
    "sync_loss": "no loss.item() per micro-batch (a host sync on GPU)",
    "clip_grad": "gradient clipping (a cost, kept to match real training)",
    "optimizer_impl": "one multi-tensor AdamW kernel instead of one per parameter",
    "zero_grad_set_to_none": "no memset of every gradient",
    **GPU_ONLY,
}


def applies_on(knob: str) -> str:
    """``"GPU"`` for the GPU-only fixes, else ``"CPU and GPU"``."""
    return "GPU" if knob in GPU_ONLY else "CPU and GPU"


def _field_types() -> dict[str, type]:
    return typing.get_type_hints(WorkloadConfig)


def _cpus_per_rank() -> int:
    """CPU cores each rank on this host can use (sizes the loader workers)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    return max(1, cpus // max(1, local))


def preset_config(name: str, *, cuda: bool | None = None, cpus_per_rank: int | None = None) -> WorkloadConfig:
    """The config of preset ``name`` for this device (cuda and cores default to this process's)."""
    if name not in PRESETS:
        raise KnobError(f"unknown preset {name!r} (choose from {', '.join(PRESETS)})")
    if cuda is None:
        cuda = _cuda_available()
    if cpus_per_rank is None:
        cpus_per_rank = _cpus_per_rank()
    values = {k: (v(cuda, cpus_per_rank) if callable(v) else v) for k, v in PRESETS[name].items()}
    return dataclasses.replace(WorkloadConfig(), **values)


def _parse_value(key: str, raw: str, typ: type) -> Any:
    text = raw.strip()
    if typ is bool:
        low = text.lower()
        if low in ("1", "true", "yes", "on", "y", "t"):
            return True
        if low in ("0", "false", "no", "off", "n", "f"):
            return False
        raise KnobError(f"{key} takes true/false (got {raw!r})")
    try:
        return typ(text)
    except ValueError:
        raise KnobError(f"{key} takes {'an integer' if typ is int else 'a number' if typ is float else typ.__name__}"
                        f" (got {raw!r})") from None


def parse_overrides(pairs: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``["num_workers=4", "amp=bf16"]`` -> typed dict, typed from WorkloadConfig's field types."""
    types = _field_types()
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise KnobError(f"--set takes key=value (got {pair!r})")
        if key not in types:
            raise KnobError(f"unknown knob {key!r}; knobs: {', '.join(types)}")
        out[key] = _parse_value(key, raw, types[key])
    return out


def validate(cfg: WorkloadConfig) -> WorkloadConfig:
    """Reject values that would crash or silently do nothing deep inside torch."""
    for key, options in CHOICES.items():
        if getattr(cfg, key) not in options:
            raise KnobError(f"{key} must be one of {', '.join(options)} (got {getattr(cfg, key)!r})")
    positive = ("mlp_in", "mlp_hidden", "d_model", "tf_layers", "tf_heads", "seq_len", "vocab",
                "deep_layers", "deep_width", "accum_steps", "prefetch_factor")
    for key in positive:
        if getattr(cfg, key) < 1:
            raise KnobError(f"{key} must be >= 1 (got {getattr(cfg, key)})")
    non_negative = ("batch_size", "num_workers", "item_delay_ms", "epoch_steps", "clip_grad", "lr")
    for key in non_negative:
        if getattr(cfg, key) < 0:
            raise KnobError(f"{key} must be >= 0 (got {getattr(cfg, key)})")
    if cfg.num_classes < 2:
        raise KnobError(f"num_classes must be >= 2 (got {cfg.num_classes})")
    if cfg.bucket_cap_mb <= 0:
        raise KnobError(f"bucket_cap_mb must be > 0 (got {cfg.bucket_cap_mb})")
    if cfg.d_model % cfg.tf_heads:
        raise KnobError(f"d_model ({cfg.d_model}) must be divisible by tf_heads ({cfg.tf_heads})")
    if cfg.slow_rank < -1:
        raise KnobError(f"slow_rank must be a rank or -1 for all ranks (got {cfg.slow_rank})")
    return cfg


def apply_overrides(cfg: WorkloadConfig, overrides: dict[str, Any]) -> WorkloadConfig:
    """A validated copy of ``cfg`` with ``overrides`` (already typed) applied."""
    types = _field_types()
    for key in overrides:
        if key not in types:
            raise KnobError(f"unknown knob {key!r}; knobs: {', '.join(types)}")
    return validate(dataclasses.replace(cfg, **overrides))


def resolve_auto(cfg: WorkloadConfig, cuda: bool) -> WorkloadConfig:
    """Fill in the "0 = auto" fields for the device the job runs on."""
    if cfg.batch_size == 0:
        cfg = dataclasses.replace(cfg, batch_size=256 if cuda else 16)
    return cfg


def knob_table() -> list[tuple[str, str, Any, str]]:
    """(name, type, default, comment) per knob, read from this file's field comments, for --help."""
    import inspect

    comments: dict[str, str] = {}
    try:
        for line in inspect.getsource(WorkloadConfig).splitlines():
            name, _, rest = line.strip().partition(":")
            if "#" in rest and name.isidentifier():
                comments[name] = rest.split("#", 1)[1].strip()
    except (OSError, TypeError):  # pragma: no cover - source not shipped
        pass
    types = _field_types()
    return [(f.name, types[f.name].__name__, f.default, comments.get(f.name, ""))
            for f in dataclasses.fields(WorkloadConfig)]


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


# --------------------------------------------------------------------------- data


class SyntheticDataset:
    """Deterministic random samples: the same index gives the same sample on every rank and run.

    A plain class (DataLoader needs only ``__len__``/``__getitem__``) so that it
    can be sent to spawn-started DataLoader workers and this module stays importable without
    torch. ``delay_s`` sleeps per item to simulate a slow input pipeline.
    """

    def __init__(self, size: int, kind: str, cfg_dims: dict[str, int], seed: int, delay_s: float) -> None:
        self.size, self.kind, self.dims, self.seed, self.delay_s = size, kind, cfg_dims, seed, delay_s

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int):
        import torch

        if self.delay_s:
            time.sleep(self.delay_s)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + int(index))
        if self.kind == "transformer":
            x = torch.randint(0, self.dims["vocab"], (self.dims["seq_len"],), generator=g)
        else:
            x = torch.randn(self.dims["features"], generator=g)
        y = int(torch.randint(0, self.dims["num_classes"], (1,), generator=g))
        return x, y

    def __getitems__(self, indices: list[int]):
        """A whole batch at once (DataLoader uses this when present): one generator call instead of one per
        sample, so large GPU batches are not loader-bound. Deterministic per batch (seeded by its first index);
        the per-item delay still applies to every item."""
        import torch

        if self.delay_s:
            time.sleep(self.delay_s * len(indices))
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + int(indices[0]) if len(indices) else self.seed)
        n = len(indices)
        if self.kind == "transformer":
            x = torch.randint(0, self.dims["vocab"], (n, self.dims["seq_len"]), generator=g)
        else:
            x = torch.randn(n, self.dims["features"], generator=g)
        y = torch.randint(0, self.dims["num_classes"], (n,), generator=g).tolist()
        return list(zip(x.unbind(0), y))


def _input_dims(cfg: WorkloadConfig) -> dict[str, int]:
    features = {"mlp": cfg.mlp_in, "deep": cfg.deep_width}.get(cfg.model, 0)
    return {"features": features, "vocab": cfg.vocab, "seq_len": cfg.seq_len, "num_classes": cfg.num_classes}


def build_loader(cfg: WorkloadConfig, rank: int, world_size: int, total_micro_batches: int, cuda: bool):
    """DataLoader + DistributedSampler over the synthetic set, sized for the run (or epoch_steps)."""
    import torch
    from torch.utils.data import DataLoader, DistributedSampler

    micro_per_epoch = (cfg.epoch_steps * cfg.accum_steps) if cfg.epoch_steps else total_micro_batches
    size = micro_per_epoch * cfg.batch_size * world_size
    slow = cfg.slow_rank in (-1, rank)
    ds = SyntheticDataset(size, cfg.model, _input_dims(cfg), cfg.seed,
                          cfg.item_delay_ms / 1000.0 if slow else 0.0)
    sampler = DistributedSampler(ds, num_replicas=world_size, rank=rank, shuffle=True, seed=cfg.seed,
                                 drop_last=True)
    workers = cfg.num_workers
    kwargs: dict[str, Any] = {}
    if workers > 0:
        kwargs["persistent_workers"] = cfg.persistent_workers
        kwargs["prefetch_factor"] = cfg.prefetch_factor
    # pin_memory without an accelerator only warns; keep the trace honest about what happened
    loader = DataLoader(ds, batch_size=cfg.batch_size, sampler=sampler, num_workers=workers,
                        pin_memory=cfg.pin_memory and cuda, drop_last=True,
                        generator=torch.Generator().manual_seed(cfg.seed), **kwargs)
    return loader, sampler


def _batches(loader, sampler):
    """Endless batches, calling set_epoch so every epoch reshuffles like a real job."""
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


# --------------------------------------------------------------------------- model


def build_model(cfg: WorkloadConfig):
    """The bare (non-DDP) model for ``cfg.model``; classes are local so torch stays a lazy import."""
    import torch
    from torch import nn

    torch.manual_seed(cfg.seed)
    if cfg.model == "mlp":
        return nn.Sequential(nn.Linear(cfg.mlp_in, cfg.mlp_hidden), nn.ReLU(),
                             nn.Linear(cfg.mlp_hidden, cfg.num_classes))
    if cfg.model == "deep":
        layers: list[nn.Module] = []
        for _ in range(cfg.deep_layers):
            layers += [nn.Linear(cfg.deep_width, cfg.deep_width), nn.ReLU()]
        return nn.Sequential(*layers, nn.Linear(cfg.deep_width, cfg.num_classes))

    class TinyTransformer(nn.Module):
        """Token classifier: embedding -> encoder layers -> mean pool -> linear head."""

        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
            layer = nn.TransformerEncoderLayer(cfg.d_model, cfg.tf_heads, dim_feedforward=4 * cfg.d_model,
                                               dropout=0.0, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, cfg.tf_layers, enable_nested_tensor=False)
            self.head = nn.Linear(cfg.d_model, cfg.num_classes)

        def forward(self, tokens):
            return self.head(self.encoder(self.embed(tokens)).mean(dim=1))

    return TinyTransformer()


def build_optimizer(cfg: WorkloadConfig, params):
    """AdamW in the chosen implementation: single (per-parameter loop), foreach, or fused."""
    import torch

    impl = {"single": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}
    return torch.optim.AdamW(params, lr=cfg.lr, **impl[cfg.optimizer_impl])


def build_grad_scaler(cfg: WorkloadConfig, device_type: str, note) -> Any:
    """GradScaler per cfg.grad_scaler; None when off or unsupported here (with a note, not a crash)."""
    import torch

    wanted = cfg.grad_scaler == "on" or (cfg.grad_scaler == "auto" and cfg.amp == "fp16")
    if not wanted:
        return None
    try:
        return torch.amp.GradScaler(device_type)
    except (AttributeError, RuntimeError, TypeError) as e:
        note(f"GradScaler is not available for {device_type} in torch {torch.__version__} ({e}); running without it")
        return None


# --------------------------------------------------------------------------- the run


def _init_distributed(cuda: bool) -> tuple[int, int, int, str]:
    """(rank, world_size, local_rank, backend); a 1-rank group when not launched by torchrun."""
    import torch.distributed as dist

    backend = "nccl" if cuda else "gloo"
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if cuda:
            import torch

            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend)
    else:
        local_rank = 0
        if cuda:
            import torch

            torch.cuda.set_device(0)
        fd, store = tempfile.mkstemp(prefix="traceinspect-store-")
        os.close(fd)
        dist.init_process_group(backend, init_method=f"file://{store}", rank=0, world_size=1)
    return dist.get_rank(), dist.get_world_size(), local_rank, backend


def run(cfg: WorkloadConfig, out: str, *, preset: str | None = None, wait: int = 1, warmup: int = 1,
        active: int = 3, repeat: int = 1, skip_first: int = 0, steps: int = 0, gzip: bool = True,
        record_shapes: bool = False, profile_memory: bool = False, with_stack: bool = False,
        quiet: bool = False) -> dict[str, Any]:
    """Train ``steps`` optimizer steps of ``cfg`` under :func:`traceinspect.capture.profile`.

    ``steps=0`` runs exactly what the schedule needs plus one spare step. Must be
    called in every rank's process (torchrun); returns a small summary dict.

    Teardown is explicit: everything that holds the process group or the
    profiler (DDP's reducer, the loader, the torch profiler) is released inside
    :func:`_train` and garbage-collected, then the ranks meet at a barrier and
    destroy the group. Rarely (about 1 run in 15-40 on a loaded 2-core box),
    torch 2.13 CPU runs died at interpreter exit with "terminate called without
    an active exception" (SIGABRT) after everything was written; the entry
    point therefore also leaves with ``os._exit`` (see the end of this file).
    """
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    cfg = resolve_auto(validate(cfg), cuda)
    need = _capture.required_steps(wait, warmup, active, repeat, skip_first)
    total = steps or need + 1
    # check the folder before the process group so a typo fails fast on every rank
    _capture._check_writable(Path(out))
    rank, world, local_rank, backend = _init_distributed(cuda)
    finished = False
    try:
        summary = _train(cfg, out, rank=rank, world=world, local_rank=local_rank, backend=backend,
                         preset=preset, total=total,
                         profile_kwargs=dict(wait=wait, warmup=warmup, active=active, repeat=repeat,
                                             skip_first=skip_first, record_shapes=record_shapes,
                                             profile_memory=profile_memory, with_stack=with_stack,
                                             gzip=gzip, verbose=not quiet),
                         quiet=quiet)
        finished = True
    finally:
        gc.collect()
        if finished and world > 1:
            dist.barrier(device_ids=[local_rank]) if backend == "nccl" else dist.barrier()
        dist.destroy_process_group()
    if rank == 0 and not quiet:
        times = summary["step_times_s"]
        tail = times[-active:] if len(times) >= active else times
        print(f"traceinspect.capture.workload: rank 0 ran {total} steps ({cfg.model}, {backend}, world {world}); "
              f"mean of last {len(tail)}: {1000 * sum(tail) / len(tail):.1f} ms/step", flush=True)
    return summary


def _train(cfg: WorkloadConfig, out: str, *, rank: int, world: int, local_rank: int, backend: str,
           preset: str | None, total: int, profile_kwargs: dict[str, Any], quiet: bool) -> dict[str, Any]:
    """Build loader/model/optimizer, run ``total`` profiled steps; all of it is freed on return."""
    import torch
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    cuda = torch.cuda.is_available()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")

    def note(msg: str) -> None:
        if rank == 0 and not quiet:
            print(f"traceinspect.capture.workload: {msg}", file=sys.stderr, flush=True)

    if cuda:
        torch.set_float32_matmul_precision("high" if cfg.tf32 else "highest")
    elif cfg.tf32:
        note("tf32 has no effect on CPU")
    if cfg.pin_memory and not cuda:
        note("pin_memory has no effect without CUDA; loading pageable batches")
    loader, sampler = build_loader(cfg, rank, world, total * cfg.accum_steps, cuda)
    model = build_model(cfg).to(device)
    ddp = DDP(model, device_ids=[local_rank] if cuda else None, bucket_cap_mb=cfg.bucket_cap_mb,
              gradient_as_bucket_view=cfg.gradient_as_bucket_view, static_graph=cfg.static_graph,
              find_unused_parameters=cfg.find_unused_parameters)
    opt = build_optimizer(cfg, ddp.parameters())
    scaler = build_grad_scaler(cfg, device.type, note)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.amp)
    workload_meta = {"preset": preset, "device": str(device), "backend": backend, "steps": total,
                     **dataclasses.asdict(cfg)}

    batches = _batches(loader, sampler)
    step_times: list[float] = []
    try:
        with _capture.profile(out, dataloader=loader, model=ddp, accumulation_steps=cfg.accum_steps,
                              no_sync=cfg.no_sync, amp_dtype=amp_dtype,
                              grad_scaler=scaler if scaler is not None else False,
                              workload=workload_meta, **profile_kwargs) as prof:
            for _ in range(total):
                t0 = time.perf_counter()
                _train_step(cfg, ddp, opt, scaler, batches, device, amp_dtype, F)
                prof.step()
                step_times.append(time.perf_counter() - t0)
    finally:
        batches.close()  # shuts the loader's iterator (and its worker processes) down now
    if cuda:
        torch.cuda.synchronize(device)
    return {"rank": rank, "world_size": world, "files": [str(p) for p in prof.files],
            "step_times_s": step_times}


def _train_step(cfg, ddp, opt, scaler, batches, device, amp_dtype, F) -> None:
    """One optimizer step: ``accum_steps`` micro-batches, then clip + step + zero_grad."""
    import torch

    for micro in range(cfg.accum_steps):
        x, y = next(batches)
        x = x.to(device, non_blocking=cfg.non_blocking)
        y = y.to(device, non_blocking=cfg.non_blocking)
        skip_sync = cfg.no_sync and micro < cfg.accum_steps - 1
        with ddp.no_sync() if skip_sync else contextlib.nullcontext():
            autocast = (torch.autocast(device.type, dtype=amp_dtype) if amp_dtype is not None
                        else contextlib.nullcontext())
            with autocast:
                loss = F.cross_entropy(ddp(x).float(), y) / cfg.accum_steps
            (scaler.scale(loss) if scaler is not None else loss).backward()
        if cfg.sync_loss:
            loss.item()
    if scaler is not None and cfg.clip_grad:
        scaler.unscale_(opt)
    if cfg.clip_grad:
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), cfg.clip_grad,
                                       foreach=cfg.optimizer_impl != "single")
    if scaler is not None:
        scaler.step(opt)
        scaler.update()
    else:
        opt.step()
    opt.zero_grad(set_to_none=cfg.zero_grad_set_to_none)


# --------------------------------------------------------------------------- entry


def build_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m traceinspect.capture.workload",
        description="One rank of the reference DDP workload, profiled (launch with torchrun).",
        epilog="Knobs (--set key=value):\n" + "\n".join(
            f"  {n} ({t}, default {d!r}): {c}" for n, t, d, c in knob_table()),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="optimized", choices=sorted(PRESETS), help="starting config")
    p.add_argument("--out", default="./log/profile_ddp", help="trace folder (default ./log/profile_ddp)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override one knob; repeatable")
    p.add_argument("--model", choices=CHOICES["model"], help="shortcut for --set model=...")
    p.add_argument("--steps", type=int, default=0, help="optimizer steps to run (0 = what the schedule needs + 1)")
    p.add_argument("--wait", type=int, default=1)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--active", type=int, default=3)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--skip-first", type=int, default=0)
    p.add_argument("--no-gzip", action="store_true", help="write plain .json traces")
    p.add_argument("--record-shapes", action="store_true")
    p.add_argument("--profile-memory", action="store_true")
    p.add_argument("--with-stack", action="store_true")
    p.add_argument("--show-config", action="store_true", help="print the resolved config as JSON and exit")
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    return p


def config_from_args(preset: str, overrides: list[str], model: str | None = None, *,
                     cuda: bool | None = None) -> WorkloadConfig:
    """Preset + ``--model`` + ``--set`` pairs -> validated config (raises KnobError).

    ``cuda`` picks the device-dependent preset values; None asks torch. Passing
    a bool keeps torch unimported, which is how the CLI checks knobs instantly.
    """
    values = parse_overrides(overrides)
    if model is not None:
        values.setdefault("model", model)
    return apply_overrides(preset_config(preset, cuda=cuda), values)


def main(argv: list[str] | None = None) -> int:
    """Per-rank entry point; returns the exit code (0 ok, 2 bad use, 1 failure)."""
    args = build_arg_parser().parse_args(argv)
    try:
        cfg = config_from_args(args.preset, args.overrides, args.model)
        if args.show_config:
            print(json.dumps(dataclasses.asdict(resolve_auto(cfg, _cuda_available())), indent=2))
            return 0
        if args.steps < 0:
            raise KnobError(f"--steps must be >= 0 (got {args.steps})")
        run(cfg, args.out, preset=args.preset, wait=args.wait, warmup=args.warmup, active=args.active,
            repeat=args.repeat, skip_first=args.skip_first, steps=args.steps, gzip=not args.no_gzip,
            record_shapes=args.record_shapes, profile_memory=args.profile_memory,
            with_stack=args.with_stack, quiet=args.quiet)
    except (KnobError, _capture.CaptureError) as e:
        rank = os.environ.get("RANK", "0")
        print(f"traceinspect: error (rank {rank}): {e}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    _code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Everything is written and torn down by now; skipping interpreter and C++ static
    # teardown avoids a rare exit-time abort in torch (see run()), which torchrun would
    # report as a failed rank although the traces are complete.
    os._exit(_code)
