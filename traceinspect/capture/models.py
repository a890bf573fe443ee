"""The reference workload's data and model: a synthetic dataset behind a DataLoader, the model, the optimizer and
the gradient scaler, each built from a :class:`~traceinspect.capture.knobs.WorkloadConfig`.

torch is imported inside functions only. Imports nothing from traceinspect but :mod:`traceinspect.capture`.
"""

from __future__ import annotations

import time
from typing import Any

from .knobs import WorkloadConfig


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
    """AdamW (or SGD with momentum 0.9) in the chosen implementation: single (per-parameter loop), foreach, or fused."""
    import torch

    impl = {"single": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=0.9, **impl[cfg.optimizer_impl])
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
