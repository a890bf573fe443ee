"""What the run is, recorded once per rank: device, optimizer and its flags, compiled regions, graph replays, AMP,
the DataLoader, host<->device copies, CPU cores and parallelism.

Every fact is read from the trace (event names, the step table, the other analyses' tables) or from the capture
metadata a traceinspect capture writes (``"traceinspect"`` key). A fact neither shows is ``None``, never a guess;
``not_recorded`` names those facts. The fields are defined in docs/setup.md. Nothing here imports torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .events import name_mask, runtime_mask
from ..load.trace import Kind, RankTrace

OPT_STEP = re.compile(r"^Optimizer\.step#(?P<cls>[^.#]+)\.step$")
FUSED_OP = re.compile(r"^aten::_fused_[a-z]+_?$")
FOREACH_OP = re.compile(r"^aten::_foreach_")
# torch.compile's markers: Dynamo's frame annotations, AOTAutograd's function, Inductor's generated kernels.
COMPILED_REGION = re.compile(r"^Torch-Compiled Region|^CompiledFunction(Backward)?$|^## Call CompiledFxGraph")
DYNAMO_LOOKUP = "TorchDynamo Cache Lookup"
TRITON_KERNEL = re.compile(r"^triton_")
GRAPH_LAUNCH = re.compile(r"^(cuda|cu|hip)GraphLaunch(_v\d+)?$")
COMM_OP = re.compile(r"^(nccl|gloo|c10d)[:_]|^record_param_comms$")


@dataclass(frozen=True)
class OptimizerSetup:
    """``name``: the optimizer class (``Optimizer.step#<class>.step``), None without a step; ``steps``: step calls
    in the trace; ``fused`` / ``foreach``: whether its update ran as fused ops (``aten::_fused_*``, or a ``Fused*``
    class) / as foreach ops (``aten::_foreach_*``), None where no op of the step was recorded; ``capturable``:
    not visible in op names (None unless the capture recorded it)."""

    present: bool
    name: str | None = None
    steps: int = 0
    fused: bool | None = None
    foreach: bool | None = None
    capturable: bool | None = None


@dataclass(frozen=True)
class CompileSetup:
    """torch.compile's traces in the events: compiled-region annotations (Dynamo frames, ``CompiledFunction``),
    Dynamo cache lookups, Inductor's Triton kernels; ``mode``: the compile mode the capture recorded, else
    ``"reduce-overhead"`` where CUDA/HIP graphs are replayed inside the compiled regions (torch.compile's CUDA
    graphs), else None."""

    compiled: bool
    regions: int = 0
    cache_lookups: int = 0
    triton_kernels: int = 0
    mode: str | None = None


@dataclass(frozen=True)
class LoaderSetup:
    """The DataLoader: ``fetches`` (its ``__next__`` annotations in steps), ``worker_fetches`` (of them, from worker
    processes); ``num_workers`` / ``pin_memory`` / ``persistent_workers`` / ``batch_size`` from the capture
    metadata, else ``num_workers`` 0 only where every fetch ran in-process, else None."""

    fetches: int = 0
    worker_fetches: int = 0
    num_workers: int | None = None
    pin_memory: bool | None = None
    persistent_workers: bool | None = None
    batch_size: int | None = None
    source: str = "trace"  # "capture metadata" or "trace"


@dataclass(frozen=True)
class CopySetup:
    """Host<->device copies over the rank's steps: counts and bytes by direction and host memory kind."""

    h2d_pinned_count: int | None = None
    h2d_pinned_bytes: int | None = None
    h2d_pageable_count: int | None = None
    h2d_pageable_bytes: int | None = None
    d2h_pageable_count: int | None = None
    d2h_pageable_bytes: int | None = None


@dataclass(frozen=True)
class Setup:
    """What one rank's run is (docs/setup.md)."""

    device: str  # "cuda", "rocm", "cpu" (no GPU events), or "gpu" (GPU events of an unknown runtime)
    device_name: str | None
    optimizer: OptimizerSetup
    compile: CompileSetup
    graph_launches: int  # CUDA/HIP graph replays (cudaGraphLaunch / hipGraphLaunch calls)
    amp_dtype: str | None  # "bfloat16", "float16", "none" (matrix kernels in fp32/TF32); None: not known
    amp_source: str | None  # "capture metadata" or "matmul kernels"
    grad_scaler: bool | None
    loader: LoaderSetup
    copies: CopySetup
    cpu_count: int | None  # CPU cores the rank could use, from the capture metadata
    # analyze/strategy.py's kinds joined by "+" ("ddp", "fsdp2", "fsdp1", "tp", "pp", "fsdp2+tp"); "none": no
    # collective on a single-rank run; None: collectives the strategy recogniser cannot name
    parallelism: str | None
    backend: str | None
    world_size: int | None
    not_recorded: tuple[str, ...] = field(default_factory=tuple)

    @property
    def graph_replay(self) -> bool:
        return self.graph_launches > 0


def describe_setup(rank: RankTrace, steps: pd.DataFrame, tables: dict) -> Setup:
    """One rank's ``Setup`` from its events, its step table and the analyses' tables (``precision``'s matmul
    kernels, ``optimizer``'s AMP ops)."""
    ev = rank.events
    meta = rank.metadata if isinstance(rank.metadata, dict) else {}
    work = meta.get("workload") if isinstance(meta.get("workload"), dict) else {}
    counts = _name_counts(ev)
    device = _device(ev, rank)
    amp, amp_source = _amp(meta, steps)
    cpu_count = _int(meta.get("cpu_count"))
    parallelism = _parallelism(counts, rank, tables, len(steps))
    opt = _optimizer(ev, counts)
    setup = Setup(
        device=device,
        device_name=rank.device_name,
        optimizer=opt,
        compile=_compile(counts, work, _graphs_in_regions(ev)),
        graph_launches=_count(counts, GRAPH_LAUNCH, runtime_only=True),
        amp_dtype=amp,
        amp_source=amp_source,
        grad_scaler=_grad_scaler(meta, tables.get("amp_ops")),
        loader=_loader(meta, steps),
        copies=_copies(steps, device),
        cpu_count=cpu_count,
        parallelism=parallelism,
        backend=_backend(rank, work),
        world_size=rank.world_size,
    )
    missing = [k for k in ("amp_dtype", "cpu_count", "parallelism", "backend", "world_size")
               if getattr(setup, k) is None]
    missing += [f"optimizer.{k}" for k in ("fused", "foreach", "capturable") if opt.present and getattr(opt, k) is None]
    missing += [f"loader.{k}" for k in ("num_workers", "pin_memory") if getattr(setup.loader, k) is None]
    return _replace(setup, not_recorded=tuple(missing))


def _replace(setup: Setup, **kw) -> Setup:
    from dataclasses import replace

    return replace(setup, **kw)


def _name_counts(ev: pd.DataFrame) -> pd.DataFrame:
    """Per (name, kind): how many events; the name table every marker is looked up in (once per distinct name)."""
    if not len(ev):
        return pd.DataFrame({"name": pd.Series(dtype=object), "kind": pd.Series(dtype=np.int64),
                             "count": pd.Series(dtype=np.int64)})
    codes, kind = ev["name"].cat.codes.to_numpy(), ev["kind"].to_numpy()
    # (name, kind) as one integer, numbered in order of first appearance (what a groupby without sorting gives)
    pair, first = pd.factorize((codes.astype(np.int64) + 1) * 256 + kind)
    count = np.bincount(pair, minlength=len(first)).astype(np.int64)
    cats = ev["name"].cat.categories
    names = [str(cats[i]) if i >= 0 else "" for i in (first // 256 - 1).tolist()]
    return pd.DataFrame({"name": names, "kind": (first % 256).astype(kind.dtype), "count": count})


def _count(counts: pd.DataFrame, pattern: re.Pattern, kinds: tuple[Kind, ...] | None = None,
           runtime_only: bool = False) -> int:
    if runtime_only:
        kinds = (Kind.RUNTIME, Kind.DRIVER)
    sel = np.array([bool(pattern.search(s)) for s in counts["name"]], bool)
    if kinds is not None:
        sel = sel & counts["kind"].isin([int(k) for k in kinds]).to_numpy()
    return int(counts["count"].to_numpy()[sel].sum())


def _device(ev: pd.DataFrame, rank: RankTrace) -> str:
    if not rank.has_gpu:
        return "cpu"
    rt = runtime_mask(ev)
    if (rt & name_mask(ev, lambda s: s.startswith("hip"))).any():
        return "rocm"
    if (rt & name_mask(ev, lambda s: s.startswith(("cuda", "cu")))).any():
        return "cuda"
    return "gpu"


def _optimizer(ev: pd.DataFrame, counts: pd.DataFrame) -> OptimizerSetup:
    """The optimizer class from its step annotation; its flags from the ops that ran inside the step calls on
    their thread (fused anywhere in the file counts too: Lightning's step boundary can fall inside the step)."""
    kind = ev["kind"].to_numpy()
    is_span = (kind == int(Kind.USER_ANNOTATION)) | (kind == int(Kind.CPU_OP))
    step_rows = np.flatnonzero(is_span & name_mask(ev, lambda s: bool(OPT_STEP.match(s))))
    if not len(step_rows):
        return OptimizerSetup(present=False)
    names = pd.Series(ev["name"].to_numpy()[step_rows].astype(str))
    cls = names.str.extract(OPT_STEP)["cls"].value_counts().index[0]
    inside = _ops_inside(ev, step_rows)
    fused_anywhere = _count(counts, FUSED_OP, kinds=(Kind.CPU_OP,)) > 0
    if cls.startswith("Fused") or fused_anywhere or (inside is not None and inside["fused"]):
        fused, foreach = True, False
    elif inside is None:
        fused = foreach = None
    else:
        fused, foreach = False, inside["foreach"]
    return OptimizerSetup(present=True, name=cls, steps=len(step_rows), fused=fused, foreach=foreach)


def _ops_inside(ev: pd.DataFrame, spans: np.ndarray) -> dict | None:
    """Whether any fused / foreach op ran inside the spans on their thread; None when no op ran inside any."""
    kind = ev["kind"].to_numpy()
    ts, dur, tid, win = (ev[c].to_numpy() for c in ("ts", "dur", "tid", "window"))
    cpu = np.flatnonzero(kind == int(Kind.CPU_OP))
    cpu = cpu[np.argsort(ts[cpu], kind="stable")]  # by start: the ops starting in a span are one slice
    cts = ts[cpu]
    # An op that ends by a span's end started by then, unless its duration is negative (a broken trace).
    bounded = not (dur[cpu] < 0).any()
    fused = name_mask(ev, lambda s: bool(FUSED_OP.match(s)))
    foreach = name_mask(ev, lambda s: bool(FOREACH_OP.match(s)) and s != "aten::_foreach_zero_")
    found = {"ops": 0, "fused": False, "foreach": False}
    for s in spans:
        end = ts[s] + dur[s]
        c = cpu[np.searchsorted(cts, ts[s], "left"):np.searchsorted(cts, end, "right") if bounded else len(cpu)]
        rows = c[(win[c] == win[s]) & (tid[c] == tid[s]) & (ts[c] >= ts[s]) & (ts[c] + dur[c] <= end) & (c != s)]
        found["ops"] += len(rows)
        found["fused"] |= bool(fused[rows].any())
        found["foreach"] |= bool(foreach[rows].any())
    return found if found["ops"] else None


def _compile(counts: pd.DataFrame, work: dict, graphs_in_regions: bool) -> CompileSetup:
    spans = (Kind.CPU_OP, Kind.USER_ANNOTATION)
    regions = _count(counts, COMPILED_REGION, kinds=spans)
    lookups = _count(counts, re.compile(f"^{DYNAMO_LOOKUP}$"), kinds=spans)
    triton = _count(counts, TRITON_KERNEL, kinds=(Kind.KERNEL,))
    mode = work.get("compile") if isinstance(work.get("compile"), str) and work.get("compile") != "none" else None
    if mode is None and graphs_in_regions:  # the trace shows it: the compiled code replays CUDA graphs
        mode = "reduce-overhead"
    return CompileSetup(compiled=bool(regions or lookups or triton), regions=regions, cache_lookups=lookups,
                        triton_kernels=triton, mode=mode)


def _graphs_in_regions(ev: pd.DataFrame) -> bool:
    """Whether a graph replay (``cudaGraphLaunch``...) ran inside a compiled region's span, on its thread."""
    kind = ev["kind"].to_numpy()
    launches = np.flatnonzero(((kind == int(Kind.RUNTIME)) | (kind == int(Kind.DRIVER)))
                              & name_mask(ev, lambda s: bool(GRAPH_LAUNCH.match(s))))
    if not len(launches):
        return False
    is_span = (kind == int(Kind.USER_ANNOTATION)) | (kind == int(Kind.CPU_OP))
    regions = np.flatnonzero(is_span & name_mask(ev, lambda s: bool(COMPILED_REGION.search(s))))
    ts, dur, tid, win = (ev[c].to_numpy() for c in ("ts", "dur", "tid", "window"))
    for r in regions:
        inside = ((win[launches] == win[r]) & (tid[launches] == tid[r]) & (ts[launches] >= ts[r])
                  & (ts[launches] + dur[launches] <= ts[r] + dur[r]))
        if inside.any():
            return True
    return False


def _amp(meta: dict, steps: pd.DataFrame) -> tuple[str | None, str | None]:
    """The autocast dtype the capture recorded; else what the matrix kernels ran in (the precision analysis):
    the 16-bit dtype with the most matmul time, "none" where they ran only in fp32/TF32; None without them."""
    if isinstance(meta.get("amp_dtype"), str):  # the capture was told the autocast dtype
        return meta["amp_dtype"], "capture metadata"
    if meta.get("workload") and "amp_dtype" in meta:  # the reference workload always states it: null is fp32
        return "none", "capture metadata"
    if "matmul_us" not in steps or not len(steps):
        return None, None
    total = float(np.nansum(steps["matmul_us"].to_numpy(float)))
    if total <= 0:
        return None, None
    bf16 = float(np.nansum(steps["matmul_bf16_us"].to_numpy(float)))
    fp16 = float(np.nansum(steps["matmul_fp16_us"].to_numpy(float)))
    full = sum(float(np.nansum(steps[c].to_numpy(float))) for c in ("matmul_fp32_us", "matmul_tf32_us"))
    if bf16 > 0 or fp16 > 0:
        return ("bfloat16" if bf16 >= fp16 else "float16"), "matmul kernels"
    if full >= 0.5 * total:
        return "none", "matmul kernels"
    return None, None


def _grad_scaler(meta: dict, amp_ops: pd.DataFrame | None) -> bool | None:
    if isinstance(meta.get("grad_scaler"), bool):
        return meta["grad_scaler"]
    if amp_ops is not None and len(amp_ops):
        return True
    return None


def _loader(meta: dict, steps: pd.DataFrame) -> LoaderSetup:
    fetches = int(steps["dataloader_count"].sum()) if "dataloader_count" in steps else 0
    workers = int(steps["dataloader_worker_count"].sum()) if "dataloader_worker_count" in steps else 0
    dl = meta.get("dataloader")
    if isinstance(dl, dict):
        return LoaderSetup(fetches=fetches, worker_fetches=workers, num_workers=_int(dl.get("num_workers")),
                           pin_memory=_bool(dl.get("pin_memory")), persistent_workers=_bool(dl.get("persistent_workers")),
                           batch_size=_int(dl.get("batch_size")), source="capture metadata")
    # In-process fetches (``_SingleProcessDataLoaderIter``) only: the loader had no workers.
    return LoaderSetup(fetches=fetches, worker_fetches=workers, num_workers=0 if fetches and not workers else None)


def _copies(steps: pd.DataFrame, device: str) -> CopySetup:
    if device == "cpu" or "pinned_h2d_count" not in steps:
        return CopySetup()
    real = steps[~steps["synthetic"].astype(bool)] if "synthetic" in steps and (~steps["synthetic"].astype(bool)).any() \
        else steps

    def total(col: str) -> int:
        return int(real[col].sum())

    return CopySetup(h2d_pinned_count=total("pinned_h2d_count"), h2d_pinned_bytes=total("pinned_h2d_bytes"),
                     h2d_pageable_count=total("pageable_h2d_count"), h2d_pageable_bytes=total("pageable_h2d_bytes"),
                     d2h_pageable_count=total("pageable_d2h_count"), d2h_pageable_bytes=total("pageable_d2h_bytes"))


def _parallelism(counts: pd.DataFrame, rank: RankTrace, tables: dict, steps: int) -> str | None:
    """The strategy recogniser's kinds (analyze/strategy.py, the one recogniser), joined by "+"."""
    from .strategy import tables_strategy

    kinds = tables_strategy(tables, steps).kinds
    if kinds:
        return "+".join(kinds)
    spans = (Kind.CPU_OP, Kind.USER_ANNOTATION)
    comm = _count(counts, COMM_OP, kinds=spans) + _count(counts, re.compile(r"nccl|rccl", re.I), kinds=(Kind.KERNEL,))
    if comm:
        return None  # collectives ran, but the trace does not say what issued them
    return "none" if rank.world_size in (None, 1) else None


def _backend(rank: RankTrace, work: dict) -> str | None:
    dist = rank.distributed if isinstance(rank.distributed, dict) else {}
    b = dist.get("backend") or work.get("backend")
    return str(b) if isinstance(b, str) and b else None


def _int(v) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v else None


def _bool(v) -> bool | None:
    return v if isinstance(v, bool) else None


__all__ = ["CompileSetup", "CopySetup", "LoaderSetup", "OptimizerSetup", "Setup", "describe_setup"]
