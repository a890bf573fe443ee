"""host-sync: the training step blocks the CPU on the GPU.

**Detects** blocking CUDA runtime calls inside steps: ``cudaStreamSynchronize``, ``cudaDeviceSynchronize``,
``cudaEventSynchronize``, synchronous ``cudaMemcpy``, and the launch calls of pageable copies (which block until
the copy is done). Typical sources: ``loss.item()``, ``tensor.cpu()`` / ``.tolist()``, printing a CUDA tensor,
``torch.cuda.synchronize()``, boolean tests on CUDA tensors. The profiler's own synchronization when a window ends
happens between steps and is not counted.

**Condition**: the CPU is blocked for at least ``host_sync_share_warning`` (5 %) of the step's CPU time (*critical*
at ``host_sync_share_critical``, 20 %). Why 5 %: one ``.item()`` per step for logging costs a little; more than
that means the CPU repeatedly waits for the GPU to drain its queue and then has nothing queued, so the GPU idles
while the CPU catches up.

**Evidence**: blocked time and number of blocking calls per step, the calls and the CPU ops that made them.

**Fix**: keep values on the GPU inside the step and read them rarely::

    running_loss += loss.detach()              # no .item() in the step
    if step % log_every == 0:
        print(running_loss.item() / log_every)  # one sync per log_every steps

Use ``non_blocking=True`` copies into pinned buffers for results needed on the host.
"""

from __future__ import annotations

from . import Needs
from .finding import Finding
from ._util import mean, severity_for, step_ids

ID = "host-sync"
TITLE = "The CPU blocks on the GPU inside steps"
NEEDS = Needs(steps=("step",), gpu_steps=("sync_us", "cpu_step_us"), tables=("sync_calls",))

FIX = (
    "running_loss += loss.detach()               # instead of loss.item() every step\n"
    "if step % log_every == 0:\n"
    "    print(running_loss.item() / log_every)   # one sync per log_every steps"
)


def check(report, config) -> list[Finding]:
    per_rank, ranks, steps = [], [], set()
    worst = None
    for ra in report.ranks:
        s = ra.steps
        if ra.basis != "gpu" or "sync_us" not in s or not len(s):
            continue
        share = s["sync_us"] / s["cpu_step_us"].where(s["cpu_step_us"] > 0)
        mask = (share >= config.host_sync_share_warning).fillna(False).to_numpy()
        if not mask.any():
            continue
        sh = mean(share[mask])
        sev = severity_for(sh, config.host_sync_share_warning, config.host_sync_share_critical) or "warning"
        calls = ra.tables.get("sync_calls")
        top = []
        if calls is not None and len(calls):
            c = calls[calls["step"].isin(s.loc[mask, "step"])]
            g = c.groupby(["call", "op"])[["count", "total_us"]].sum().sort_values("total_us", ascending=False).head(5)
            nsteps = max(int(mask.sum()), 1)
            top = [
                {"call": k[0], "op": k[1], "count_per_step": float(v["count"]) / nsteps,
                 "us_per_step": float(v["total_us"]) / nsteps}
                for k, v in g.iterrows()
            ]
        us = mean(s.loc[mask, "sync_us"])
        if worst is None or sh > worst[0]:
            worst = (sh, sev, ra.rank, us, top)
        per_rank.append(
            {
                "rank": ra.rank,
                "steps": step_ids(s, mask),
                "blocked_us_per_step": us,
                "blocking_calls_per_step": mean(s.loc[mask, "sync_count"]),
                "share_of_step": sh,
                "top_calls": top,
            }
        )
        ranks.append(ra.rank)
        steps.update(step_ids(s, mask))
    if not per_rank:
        return []
    sh, sev, rank, us, top = worst
    what = f" (mostly {top[0]['call']} from {top[0]['op']})" if top else ""
    return [
        Finding(
            id=ID,
            severity=sev,
            title=f"CPU blocked on the GPU {us / 1000:.1f} ms per step, {100 * sh:.0f} % of the step{what}",
            ranks=sorted(ranks),
            steps=sorted(steps),
            evidence={
                "per_rank": per_rank,
                "threshold_share_warning": config.host_sync_share_warning,
                "threshold_share_critical": config.host_sync_share_critical,
            },
            fix=FIX,
            time_at_stake_us=us,
            docs=f"traceinspect explain {ID}",
        )
    ]
