"""Capture the memory and cost fixtures on one CUDA GPU, with the truth recorded beside each trace.

Usage: python3 scripts/gpu_memory.py OUT_DIR [NAME ...]      (NAME: only these captures)
       python3 scripts/gpu_memory.py OUT_DIR --small         (tiny sizes: a smoke test that runs on a CPU)

Every capture goes through ``traceinspect.capture.profile`` with ``record_shapes=True`` and ``profile_memory=True``
(schedule wait=1, warmup=1, active=3), one gzipped trace into OUT_DIR/NAME. Beside the traces, OUT_DIR/truth.json
holds what the program itself measured, per capture:

* per recorded step (keyed by its ``ProfilerStep#N`` number): ``torch.cuda.memory_allocated`` at the step's start
  and end, ``max_memory_allocated`` and ``max_memory_reserved`` after ``reset_peak_memory_stats`` at its start;
* ``flops_per_step``: ``torch.utils.flop_counter.FlopCounterMode``'s count of one optimizer step (every
  micro-batch's forward and backward);
* ``step_ms``: the step times of 8 steps run outside the profiler (CUDA-synchronized), and their median;
* for the models: ``max_batch_found``, the largest physical batch whose training step ran without running out of
  memory (doubling, then bisection to one sample), in this process, with the allocator's cache emptied first.

The captures (each changes one thing):

* ``lm_b8``, ``lm_b16``, ``lm_b32``: a 4-block decoder LM (d_model 1024, 16 heads, vocabulary 32768, sequence 512,
  bf16 autocast, fused AdamW) at three batch sizes;
* ``conv_b32``, ``conv_b64``, ``conv_b128``: a ResNet-18-shaped conv net on 224x224 images (channels_last, bf16
  autocast, fused AdamW) at three batch sizes;
* ``conv_b128_pageable``, ``conv_b128_pinned``: ``conv_b128`` with its batch copied from pageable host memory
  (``.to(device)``, blocking) and again pinned (``non_blocking=True``), captured back to back: the pinning pair;
* ``lm_b16_fp32``: ``lm_b16`` without autocast (fp32 weights and activations; TF32 off, torch's default): the
  precision pair of ``lm_b16``;
* ``lm_leak``: ``lm_b8`` that keeps every step's logits, still attached to the graph, in a list (metrics gathered
  without ``.detach()``): allocated memory grows by one logits tensor a step;
* ``lm_varlen``: the LM at batch 16 with a sequence length drawn from 64..1024 each step (after 12 such steps);
  ``lm_varlen_expandable`` the same in a process with ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``;
* ``ddp_gbv_off``, ``ddp_gbv_on``: the LM at batch 2 under DDP (world size 1, NCCL) without and with
  ``gradient_as_bucket_view``;
* ``ddp_accum_16x4``, ``ddp_accum_32x2``, ``ddp_accum_64x1``: the same logical batch of 64 as micro-batches of 16,
  32 and 64 under DDP (``no_sync`` on all but the last micro-batch, ``gradient_as_bucket_view=True``).
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import traceinspect.capture as capture  # noqa: E402

SMALL = "--small" in sys.argv
DEV = torch.device("cuda" if torch.cuda.is_available() and not SMALL else "cpu")
CUDA = DEV.type == "cuda"
LMC = dict(vocab=512, d=64, heads=4, layers=2, seq=32) if SMALL else dict(vocab=32768, d=1024, heads=16, layers=4,
                                                                           seq=512)
IMG = 32 if SMALL else 224
WIDTH = 8 if SMALL else 64
SCHED = dict(wait=1, warmup=1, active=3)
TRUTH: dict = {}


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class LM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(LMC["vocab"], LMC["d"])
        self.blocks = nn.ModuleList(Block(LMC["d"], LMC["heads"]) for _ in range(LMC["layers"]))
        self.ln = nn.LayerNorm(LMC["d"])
        self.head = nn.Linear(LMC["d"], LMC["vocab"], bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def conv_net() -> nn.Module:
    def block(cin, cout, stride):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                             nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())

    w = WIDTH
    return nn.Sequential(nn.Conv2d(3, w, 7, 2, 3, bias=False), nn.BatchNorm2d(w), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
                         block(w, w, 1), block(w, w, 1), block(w, 2 * w, 2), block(2 * w, 2 * w, 1),
                         block(2 * w, 4 * w, 2), block(4 * w, 4 * w, 1), block(4 * w, 8 * w, 2),
                         block(8 * w, 8 * w, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8 * w, 1000))


class Job:
    """A model, its optimizer and a step over host batches copied to the device (pinned, non_blocking, unless
    ``pinned`` is False); images come from a ring of ``ring`` batches made once."""

    def __init__(self, kind: str, batch: int, accum: int = 1, ddp: bool | None = None, gbv: bool = True,
                 varlen: bool = False, leak: bool = False, amp: bool = True,
                 pinned: bool = True, ring: int = 4) -> None:
        torch.manual_seed(0)
        self.kind, self.batch, self.accum, self.varlen, self.leak = kind, batch, accum, varlen, leak
        self.amp, self.pinned = amp, pinned
        model = (LM() if kind == "lm" else conv_net()).to(DEV)
        if kind == "conv":
            model = model.to(memory_format=torch.channels_last)
        self.ddp = None
        if ddp is not None:
            model = nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=gbv)
            self.ddp = model
        self.model = model
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=CUDA)
        self.kept: list = []
        self.pool: list = []
        self.ring = ring
        self.rng = torch.Generator().manual_seed(1)
        self.seq = LMC["seq"]

    def host_batch(self):
        seq = self.seq
        if self.varlen:
            seq = int(torch.randint(1, 17, (1,), generator=self.rng)) * (LMC["seq"] // 8)
        if self.kind == "lm":
            x = torch.randint(0, LMC["vocab"], (self.batch, seq + 1), generator=self.rng)
        else:  # images: a ring of batches made once (a loader's workers would hand them over ready)
            if not self.pool:
                for _ in range(self.ring):
                    x = torch.randn(self.batch, 3, IMG, IMG, generator=self.rng)
                    y = torch.randint(0, 1000, (self.batch,), generator=self.rng)
                    self.pool.append((x.pin_memory(), y.pin_memory()) if CUDA and self.pinned else (x, y))
            self.pool.append(self.pool.pop(0))
            return self.pool[0]
        return x.pin_memory() if CUDA and self.pinned else x

    def micro(self, hb, sync: bool):
        ctx = self.ddp.no_sync() if (self.ddp is not None and not sync) else _null()
        with ctx, torch.autocast(DEV.type, dtype=torch.bfloat16, enabled=self.amp):
            if self.kind == "lm":
                t = hb.to(DEV, non_blocking=self.pinned)
                logits = self.model(t[:, :-1])
                loss = F.cross_entropy(logits.float().view(-1, LMC["vocab"]), t[:, 1:].reshape(-1))
                if self.leak:
                    self.kept.append(logits)
            else:
                x = hb[0].to(DEV, non_blocking=self.pinned).contiguous(memory_format=torch.channels_last)
                y = hb[1].to(DEV, non_blocking=self.pinned)
                loss = F.cross_entropy(self.model(x), y)
        (loss / self.accum).backward()

    def step(self) -> None:
        for i in range(self.accum):
            self.micro(self.host_batch(), sync=i == self.accum - 1)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def free(self) -> None:
        self.kept.clear()
        del self.model, self.opt, self.ddp
        gc.collect()
        if CUDA:
            torch.cuda.empty_cache()


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def _sync() -> None:
    if CUDA:
        torch.cuda.synchronize()


def timed_steps(job: Job, n: int = 8) -> list[float]:
    out = []
    for _ in range(n):
        _sync()
        t0 = time.perf_counter()
        job.step()
        _sync()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def flops_of_step(job: Job) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as fc:
        job.step()
    return int(fc.get_total_flops())


def capture_job(out: str, name: str, job: Job, warm: int = 3) -> None:
    t0 = time.time()
    for _ in range(warm):
        job.step()
    leak_before = len(job.kept)
    times = [] if job.leak else timed_steps(job)
    flops = flops_of_step(job)
    job.kept = job.kept[:leak_before] if job.leak else job.kept
    steps: dict = {}
    folder = os.path.join(out, name)
    with capture.profile(folder, **SCHED, record_shapes=True, profile_memory=True, batch_size=job.batch,
                         accumulation_steps=job.accum, no_sync=job.accum > 1 if job.ddp is not None else None,
                         amp_dtype=torch.bfloat16 if job.amp else None, model=job.ddp, verbose=False,
                         workload={"model": job.kind, "batch_size": job.batch, "accumulation_steps": job.accum,
                                   "seq_len": LMC["seq"] if job.kind == "lm" else None}) as prof:
        for _ in range(sum(SCHED.values()) + 1):
            _sync()
            num = prof.profiler.step_num
            if CUDA:
                torch.cuda.reset_peak_memory_stats()
                start = torch.cuda.memory_allocated()
            job.step()
            _sync()
            if CUDA:
                steps[str(num)] = {"start_allocated": start, "end_allocated": torch.cuda.memory_allocated(),
                                   "max_allocated": torch.cuda.max_memory_allocated(),
                                   "max_reserved": torch.cuda.max_memory_reserved()}
            prof.step()
    times.sort()
    TRUTH[name] = {"batch_size": job.batch, "amp": "bf16" if job.amp else None, "accumulation_steps": job.accum,
                   "logical_batch": job.batch * job.accum,
                   "model": job.kind, "seq_len": LMC["seq"] if job.kind == "lm" else None,
                   "flops_per_step": flops, "step_ms": times, "step_ms_median": times[len(times) // 2] if times else None,
                   "steps": steps, "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
                   "device": torch.cuda.get_device_name() if CUDA else "cpu",
                   "total_bytes": torch.cuda.mem_get_info()[1] if CUDA else None}
    print(f"{name}: {time.time() - t0:.1f} s, step {TRUTH[name]['step_ms_median']} ms, flops {flops:.3e}, "
          f"peak {max((s['max_allocated'] for s in steps.values()), default=0) / 2**30:.2f} GiB", flush=True)


def fits(kind: str, batch: int) -> bool:
    job = None
    try:
        job = Job(kind, batch, ring=1)
        job.step()
        _sync()
        return True
    except torch.OutOfMemoryError:
        return False
    finally:
        if job is not None:
            job.free()
        gc.collect()
        if CUDA:
            torch.cuda.empty_cache()


def max_batch(kind: str, start: int) -> int:
    """The largest batch whose training step fits: double from ``start`` until one fails, then bisect."""
    t0 = time.time()
    lo, hi = start, None
    while hi is None:
        if fits(kind, lo * 2):
            lo *= 2
        else:
            hi = lo * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(kind, mid) else (lo, mid)
    print(f"max batch {kind}: {lo} ({time.time() - t0:.1f} s)", flush=True)
    return lo


def init_dist() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        return
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29541")
    dist.init_process_group("nccl" if CUDA else "gloo", rank=0, world_size=1)


def save_truth(path: str) -> None:
    """TRUTH merged into the file (written after every capture: a run cut short keeps what it measured)."""
    old = json.load(open(path)) if os.path.exists(path) else {}
    with open(path, "w") as f:
        json.dump(old | TRUTH, f, indent=1, sort_keys=True)


def main() -> None:
    out = sys.argv[1]
    names = [a for a in sys.argv[2:] if not a.startswith("--")]
    want = (lambda n: n in names) if names else (lambda n: True)
    os.makedirs(out, exist_ok=True)
    truth_path = os.path.join(out, "truth.json" if os.environ.get("PYTORCH_CUDA_ALLOC_CONF") is None
                              else "truth-expandable.json")
    plain = {f"lm_b{b}": ("lm", b) for b in (8, 16, 32)} | {f"conv_b{b}": ("conv", b) for b in (32, 64, 128)}
    for name, (kind, b) in plain.items():
        if want(name):
            job = Job(kind, b)
            capture_job(out, name, job)
            job.free()
            save_truth(truth_path)
    for name in ("conv_b128_pageable", "conv_b128_pinned"):
        if want(name):
            job = Job("conv", 128, pinned=name.endswith("pinned"))
            capture_job(out, name, job)
            job.free()
            save_truth(truth_path)
    if want("lm_b16_fp32"):
        job = Job("lm", 16, amp=False)
        capture_job(out, "lm_b16_fp32", job)
        job.free()
        save_truth(truth_path)
    if want("lm_leak"):
        job = Job("lm", 8, leak=True)
        capture_job(out, "lm_leak", job)
        job.free()
        save_truth(truth_path)
    for name in ("lm_varlen", "lm_varlen_expandable"):
        expandable = name.endswith("expandable")
        if not want(name) or expandable != bool(os.environ.get("PYTORCH_CUDA_ALLOC_CONF")):
            continue
        job = Job("lm", 16, varlen=True)
        capture_job(out, name, job, warm=12)
        job.free()
        save_truth(truth_path)
    ddp_jobs = {"ddp_gbv_off": dict(batch=2, gbv=False), "ddp_gbv_on": dict(batch=2, gbv=True),
                "ddp_accum_16x4": dict(batch=16, accum=4), "ddp_accum_32x2": dict(batch=32, accum=2),
                "ddp_accum_64x1": dict(batch=64, accum=1)}
    for name, kw in ddp_jobs.items():
        if want(name):
            init_dist()
            job = Job("lm", ddp=True, **kw)
            capture_job(out, name, job)
            job.free()
            save_truth(truth_path)
    if not SMALL and CUDA:
        for kind, start in (("lm", 32), ("conv", 128)):
            if want(f"max_{kind}"):
                TRUTH[f"max_batch_{kind}"] = max_batch(kind, start)
                save_truth(truth_path)
    save_truth(truth_path)
    if (not names or "lm_varlen_expandable" in names) and not os.environ.get("PYTORCH_CUDA_ALLOC_CONF"):
        env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
        subprocess.run([sys.executable, __file__, out, "lm_varlen_expandable", *(["--small"] if SMALL else [])],
                       env=env, check=True)


if __name__ == "__main__":
    main()
