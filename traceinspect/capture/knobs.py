"""The reference workload's settings: every knob (``WorkloadConfig``), the presets, which fixes pay only on a GPU
(``GPU_ONLY``) and what each buys (``WHY``), and the parsing and checks of ``--set key=value``.

Standard library only (torch is looked for, never required), so the CLI checks knobs where torch is missing.
Imports nothing from traceinspect.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from dataclasses import dataclass
from typing import Any

from ..errors import KnobError  # noqa: F401  (the error tree's; re-exported by workload)


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
    probe_loader: bool = True          # time the loader during the recorded steps (workers, pinning thread): its bound
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
    optimizer: str = "adamw"           # optimizer class: adamw (torch.optim.AdamW) | sgd (torch.optim.SGD, momentum 0.9)
    optimizer_impl: str = "single"     # optimizer implementation: single (foreach=False, per-parameter) | foreach | fused
    lr: float = 1e-3                   # learning rate
    zero_grad_set_to_none: bool = False  # optimizer.zero_grad(set_to_none=...): False memsets every gradient
    tf32: bool = False                 # CUDA: TF32 matmuls (torch.set_float32_matmul_precision("high"))
    compile: str = "none"              # torch.compile the DDP model: none | default (fused kernels) | reduce-overhead (CUDA graphs)
    sync_loss: bool = False            # call loss.item() every micro-batch (a host<->device sync, like per-step logging)
    keep_outputs: bool = False         # keep every micro-batch's output, still attached (a leak: metrics gathered without .detach())


#: Fields with a fixed set of values.
CHOICES: dict[str, tuple[str, ...]] = {
    "model": ("mlp", "transformer", "deep"),
    "amp": ("none", "bf16", "fp16"),
    "grad_scaler": ("auto", "on", "off"),
    "optimizer": ("adamw", "sgd"),
    "optimizer_impl": ("single", "foreach", "fused"),
    "compile": ("none", "default", "reduce-overhead"),
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
