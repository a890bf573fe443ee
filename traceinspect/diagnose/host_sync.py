"""host-sync: the training step blocks the CPU on the GPU.

**Detects** blocking CUDA runtime calls inside steps: ``cudaStreamSynchronize``, ``cudaDeviceSynchronize``,
``cudaEventSynchronize``, synchronous ``cudaMemcpy``, and the launch calls of pageable copies (which block until
the copy is done). Typical sources: ``loss.item()``, ``tensor.cpu()`` / ``.tolist()``, printing a CUDA tensor,
``torch.cuda.synchronize()``, boolean tests on CUDA tensors. The profiler's own synchronization when a window ends
happens between steps and is not counted.

**Condition**: the CPU is blocked for at least ``host_sync_share_warning`` (5 %) of the step's CPU time. Why 5 %:
one ``.item()`` per step for logging costs a little; more than that means the CPU repeatedly waits for the GPU to
drain its queue and then has nothing queued, so the GPU idles while the CPU catches up. It also fires, whatever the
share, on steps where a scalar read (``aten::item`` / ``aten::_local_scalar_dense``: ``.item()``, ``float(t)``)
blocks: the pattern is reported, and its severity comes from what the GPU waited (docs/findings.md), so a scalar
read that costs nothing is an info.

**Evidence**: blocked time and number of blocking calls per step, the calls and the CPU ops that made them, and what
the blocked time is (the title names the call and op that block most):

* *pageable copies* (the launch call of a pageable copy returns when the copy is done; not the scalar copy of
  ``.item()``): the time is the copies', which ``pageable-memcpy`` reports when it fires; ``owned_by:
  "pageable-memcpy"`` then links it. The fix is pinned memory;
* *DDP's runtime statistics*: ``cudaEventSynchronize`` inside ``DistributedDataParallel.forward`` with no op
  around it is DDP timing its first 10 iterations (and every 100th) for its logging; ``ddp_runtime_stats: true``:
  the profiled window sits in DDP's first iterations, so profile later (``skip_first``); there is no ``.item()`` to
  remove;
* anything else: the op that syncs (``aten::_local_scalar_dense`` is ``.item()``), with the fix below; the fix
  names the op in a comment, quoted and at most 80 characters (a name from a trace is never code).

**Fix**: keep values on the GPU inside the step and read them rarely::

    running_loss += loss.detach()              # no .item() in the step
    if step % log_every == 0:
        print(running_loss.item() / log_every)  # one sync per log_every steps

Use ``non_blocking=True`` copies into pinned buffers for results needed on the host.
"""

from __future__ import annotations

import msgspec
import numpy as np

from ._rule import Claim, Needs, PerRank, RankHit, Rule
from ._util import mean, pageable_mask, quoted, shown, step_ids
from .bounds import per_step
from .takes import Column
from .units import Count, Share, Us

FIX = (
    "running_loss += loss.detach()               # instead of loss.item() every step\n"
    "if step % log_every == 0:\n"
    "    print(running_loss.item() / log_every)   # one sync per log_every steps"
)
FIX_PAGEABLE = (
    "# the blocked time is pageable copies (see pageable-memcpy): pin the host memory, copy asynchronously\n"
    "loader = DataLoader(dataset, ..., pin_memory=True)\n"
    "x = x.to(device, non_blocking=True)"
)
FIX_DDP_STATS = (
    "# DDP times its first 10 iterations (and every 100th) with CUDA events for its runtime statistics:\n"
    "# these syncs are DDP's own, not your code's. Profile after them:\n"
    "torch.profiler.schedule(skip_first=10, wait=1, warmup=1, active=3)"
)
FIX_SYNCHRONIZE = (
    "# torch.cuda.synchronize() in the step waits for all queued GPU work: drop it, or time with CUDA events\n"
    "start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)"
)
EVENT_SYNCS = {"cudaEventSynchronize", "cuEventSynchronize", "hipEventSynchronize"}
DDP_FORWARD = "DistributedDataParallel.forward"
ITEM_OPS = {"aten::_local_scalar_dense", "aten::item"}
OWNED_SHARE = 0.5  # pageable copies are most of the blocked time: the time is the copies' (pageable-memcpy)
PAGEABLE_ID = "pageable-memcpy"  # the rule that reports pageable copies (the finding's owned_by)


class TopCall(msgspec.Struct, kw_only=True):
    call: str  # the blocking runtime call
    op: str  # the CPU op around it, as the trace names it
    pageable_copy: bool
    count_per_step: Count
    us_per_step: Us


class RankEvidence(RankHit, kw_only=True):
    blocked_us_per_step: Us
    blocking_calls_per_step: Count
    item_calls_per_step: Count
    share_of_step: Share
    pageable_copy_us_per_step: Us
    ddp_runtime_stats_us_per_step: Us
    gpu_idle_while_blocked_us_per_step: Us | None
    top_calls: list[TopCall]


class Evidence(msgspec.Struct, kw_only=True):
    per_rank: list[RankEvidence]
    blocked_by: str  # "pageable" | "ddp_stats" | "other"
    owned_by: str | msgspec.UnsetType = msgspec.UNSET  # the finding that reports the blocked time (pageable copies)
    ddp_runtime_stats: bool | msgspec.UnsetType = msgspec.UNSET
    threshold_share_warning: Share


def fix(ev: Evidence, setup=None) -> str:
    """By what the blocked time is; for another op's sync, the op named in a comment (quoted: a name is data)."""
    top = ev.per_rank[0].top_calls
    if ev.blocked_by == "pageable":
        from .fixes import pinned_copy_fix

        own = FIX_PAGEABLE if ev.owned_by else FIX_PAGEABLE.replace(" (see pageable-memcpy)", "")
        return pinned_copy_fix(setup, own)
    if ev.blocked_by == "ddp_stats":
        return FIX_DDP_STATS
    op = top[0].op if top else None
    if op in ITEM_OPS:
        return FIX
    if top and top[0].call.endswith("DeviceSynchronize"):
        return FIX_SYNCHRONIZE
    if op:
        return f"# the sync comes from {quoted(op)}:\n# keep its result on the GPU, read it every N steps\n" + FIX
    return FIX


def _top_calls(calls, steps, nsteps: int) -> list[TopCall]:
    if calls is None or not len(calls):
        return []
    c = calls[calls["step"].isin(steps)]
    keys = ["call", "op"] + (["pageable"] if "pageable" in c else [])
    g = c.groupby(keys)[["count", "total_us"]].sum().sort_values("total_us", ascending=False).head(5)
    out = []
    for k, v in g.iterrows():
        out.append(TopCall(call=k[0], op=k[1], pageable_copy=bool(k[2]) if len(k) > 2 else False,
                           count_per_step=float(v["count"]) / nsteps, us_per_step=float(v["total_us"]) / nsteps))
    return out


def _kind(calls, steps) -> tuple[str, float, float]:
    """What the blocked time is: ("pageable" | "ddp_stats" | "other"), and the us of pageable copies and of DDP's
    event syncs over the given steps."""
    if calls is None or not len(calls):
        return "other", 0.0, 0.0
    c = calls[calls["step"].isin(steps)]
    total = float(c["total_us"].sum())
    # .item() reads its scalar through a pageable copy: that wait is the sync's, not a copy's transfer time.
    pageable = float(c.loc[c["pageable"] & ~c["op"].isin(ITEM_OPS), "total_us"].sum()) if "pageable" in c else 0.0
    ddp = float(c.loc[c["call"].isin(EVENT_SYNCS) & (c["op"] == DDP_FORWARD), "total_us"].sum())
    if total > 0 and pageable >= OWNED_SHARE * total:
        return "pageable", pageable, ddp
    if total > 0 and ddp >= OWNED_SHARE * total:
        return "ddp_stats", pageable, ddp
    return "other", pageable, ddp


def _item_calls(calls, s) -> np.ndarray:
    """Per step: blocking calls made by a scalar read (``ITEM_OPS``), 0 where the table has none."""
    if calls is None or "op" not in calls:
        return np.zeros(len(s))
    return per_step(calls[calls["op"].isin(ITEM_OPS)], s, "count")


def _rank(ra, config, report):
    s = ra.steps
    if ra.basis != "gpu" or "sync_us" not in s or not len(s):
        return None
    share = s["sync_us"] / s["cpu_step_us"].where(s["cpu_step_us"] > 0)
    calls = ra.tables.get("sync_calls")
    # A scalar read (.item(), a Python float of a tensor) in every step is the pattern to report even where it is
    # cheap: the accounting then says what it costs (often nothing on a GPU-bound step).
    items = _item_calls(calls, s)
    mask = ((share >= config.host_sync_share_warning).fillna(False).to_numpy() | (items >= 1))
    if not mask.any():
        return None
    flagged = set(s.loc[mask, "step"])
    nsteps = max(int(mask.sum()), 1)
    kind, pageable_us, ddp_us = _kind(calls, flagged)
    return RankEvidence(
        rank=ra.rank,
        steps=step_ids(s, mask),
        blocked_us_per_step=mean(s.loc[mask, "sync_us"]),
        blocking_calls_per_step=mean(s.loc[mask, "sync_count"]),
        item_calls_per_step=float(items[mask].mean()),
        share_of_step=mean(share[mask]),
        pageable_copy_us_per_step=pageable_us / nsteps,
        ddp_runtime_stats_us_per_step=ddp_us / nsteps,
        gpu_idle_while_blocked_us_per_step=mean(s.loc[mask, "idle_sync_us"]) if "idle_sync_us" in s else None,
        top_calls=_top_calls(calls, flagged, nsteps),
    ), kind


def _summary(hits, w, report, config):
    e, kind, top = w.ev, w.aux, w.ev.top_calls
    us, sh = e.blocked_us_per_step, e.share_of_step
    blocked = f"{us / 1000:.1f} ms" if us >= 1000 else f"{us / 1000:.2f} ms"
    head = f"CPU blocked on the GPU {blocked} per step, {100 * sh:.0f} % of the step" if sh >= 0.01 else \
        f"CPU blocked on the GPU {blocked} per step, {100 * sh:.1f} % of the step"
    if e.item_calls_per_step >= 1:
        head = f"{e.item_calls_per_step:.0f} scalar reads (.item()) per step wait for the GPU; " + head
    extra = {}
    if kind == "pageable":
        title = head + " in pageable copies" + (f" ({shown(top[0].call)} from {shown(top[0].op)})" if top else "")
        # where pageable-memcpy reports these copies, link it rather than repeat it
        if any(pageable_mask(ra, config) is not None for ra in report.ranks):
            title += ": the copies' time, see pageable-memcpy"
            extra["owned_by"] = PAGEABLE_ID
    elif kind == "ddp_stats":
        call = shown(top[0].call) if top else "cudaEventSynchronize"
        title = (head + f" in DDP's own {call} (DDP times its first 10 iterations for its runtime statistics): "
                 "profile later (skip_first)")
        extra["ddp_runtime_stats"] = True
    else:
        title = head + (f" (mostly {shown(top[0].call)} from {shown(top[0].op)})" if top else "")
    ev = Evidence(per_rank=[h.ev for h in hits], blocked_by=kind, **extra,
                  threshold_share_warning=config.host_sync_share_warning)
    return ev, title, us


RULE = Rule(
    id="host-sync",
    title="The CPU blocks on the GPU inside steps",
    needs=Needs(steps=("step",), gpu_steps=("sync_us", "cpu_step_us"), tables=("sync_calls",)),
    claim=Claim(order=30, gpu=Column("sync", "idle_sync_us"), cpu=None),
    label="host syncs",
    thresholds=("host_sync_share_warning", "pageable_min_bytes_per_step"),
    evidence=Evidence, fix=fix, check=PerRank(_rank, _summary, worst=lambda e: e.share_of_step),
)
