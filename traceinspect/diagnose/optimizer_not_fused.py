"""optimizer-not-fused: the optimizer updates one parameter at a time, or zero_grad writes zeros.

**Detects**, inside the profiler's ``Optimizer.step#<Optimizer>.step`` and ``Optimizer.zero_grad#...`` records of
each step (CPU ops on the same thread):

- *the per-parameter path* (``foreach=False``: ``_single_tensor_adamw``, ``_single_tensor_adam``,
  ``_single_tensor_sgd``...): the step runs ops but no ``aten::_foreach_*`` or ``aten::_fused_*`` op and, on a
  GPU, launches no multi-tensor kernel (``multi_tensor_apply``). Each parameter then costs several ops and kernel
  launches (AdamW: about eight) instead of a few launches for all of them. Python function names such as
  ``_single_tensor_adamw`` are only recorded with ``with_stack``; the rule does not need them but reports them
  when present. Optimizers named ``Fused*`` (apex, DeepSpeed) count as fused;
- *zeroing gradients* (``zero_grad(set_to_none=False)``): ``aten::zero_`` / ``aten::_foreach_zero_`` (with
  ``aten::fill_`` inside) in ``zero_grad``: a pass that writes every gradient, and makes the next backward
  accumulate into memory instead of writing it.

Before concluding *per-parameter*, the rule looks at the rest of the file: an optimizer class whose ``Optimizer.step``
shows foreach / fused / multi-tensor work in any step, or whose fused op (``aten::_fused_adamw_``...) runs anywhere in
the file (also after the last step's window), is not per-parameter; nor is a call cut by the end of the recording
(Lightning puts the profiler's step boundary inside ``optimizer.step(closure)``, so the fused update of the last
step runs after the window).

**Condition**: either pattern in at least one step (the per-parameter path needs at least
``optimizer_min_ops`` (4) ops in the step, so an empty step does not count). Its claim is the CPU time inside
these records (docs/findings.md).
Works on CPU-only traces too (there ``fused=True`` AdamW/Adam/SGD also exist, torch >= 2.4).

**Evidence**: per rank and optimizer, ops per step inside ``Optimizer.step`` (foreach / fused / other), kernels
it launched and their GPU time, its CPU time; for ``zero_grad``, the zeroing ops, kernels and time. **Time at
stake**: the CPU time inside the flagged records (an upper bound: a fused step takes a small part of it).

**Fix**, for the optimizer class seen (an SGD user keeps SGD)::

    opt = torch.optim.<Class>(model.parameters(), lr=lr, foreach=True)  # or fused=True: Adam, AdamW, SGD, Adagrad
    ...
    opt.zero_grad(set_to_none=True)                                  # the default since torch 2.0
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from ._rule import Claim, Needs, PerRank, RankHit, Rule
from ._util import by_row, quoted, shown
from .takes import Estimate
from .units import COUNT, Count, Share, Us

FIX = (
    "opt = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)  # or foreach=True\n"
    "opt.zero_grad(set_to_none=True)"
)
# torch.optim classes with a fused implementation (torch >= 2.4 on CPU too); every torch.optim class takes foreach.
FUSED_CLASSES = {"Adam", "AdamW", "SGD", "Adagrad"}
TORCH_OPTIM = FUSED_CLASSES | {"RMSprop", "Adadelta", "Adamax", "NAdam", "RAdam", "ASGD", "Rprop"}


class ParameterSteps(msgspec.Struct, kw_only=True):
    """An optimizer class's per-parameter steps, per step (analyze's ``optimizer`` table)."""

    calls: Count
    cpu_us: Us
    ops: Count
    foreach_ops: Count
    fused_ops: Count
    single_tensor_ops: Count
    kernel_count: Count
    multi_tensor_kernels: Count
    gpu_us: Us


class ZeroFills(msgspec.Struct, kw_only=True):
    """An optimizer class's zero_grad calls that fill the gradients with zeros, per step."""

    calls: Count
    cpu_us: Us
    zero_ops: Count
    kernel_count: Count
    gpu_us: Us


class RankEvidence(RankHit, kw_only=True):
    basis: str
    share_of_step_cpu: Share  # of the step's CPU time
    flagged_cpu_us_per_step: Us  # CPU time in the per-parameter steps and zero-fills
    per_parameter_step: dict[str, ParameterSteps] | msgspec.UnsetType = msgspec.UNSET  # by optimizer class
    zero_grad_fills: dict[str, ZeroFills] | msgspec.UnsetType = msgspec.UNSET


class Evidence(msgspec.Struct, kw_only=True):
    per_rank: list[RankEvidence]
    patterns: list[str]  # "per-parameter", "zero-fill"
    min_ops: Annotated[int, COUNT]


def fix(ev: Evidence, setup=None) -> str:
    """The same optimizer class with foreach / fused, and set_to_none zeroing; a class the trace names that is not
    torch.optim's is quoted in a comment (a name is data)."""
    lines = []
    for name in sorted({n for e in ev.per_rank for n in (e.per_parameter_step or {})}):
        if name in FUSED_CLASSES:
            lines.append(f"opt = torch.optim.{name}(model.parameters(), lr=lr, foreach=True)  # or fused=True")
        elif name in TORCH_OPTIM:
            lines.append(f"opt = torch.optim.{name}(model.parameters(), lr=lr, foreach=True)")
        else:
            lines.append(f"# {quoted(name)}: use its multi-tensor (foreach) or fused implementation, if it has one")
    if "zero-fill" in ev.patterns:
        lines.append("opt.zero_grad(set_to_none=True)   # no pass that writes zeros into every gradient")
    return "\n".join(lines) or FIX


def _fused_elsewhere(opt, fused_ops) -> set:
    """Optimizer classes that show multi-tensor or fused work in some step, or whose fused op ran anywhere in the
    file (e.g. after the last step's window, where the step boundary falls inside ``optimizer.step(closure)``)."""
    st = opt[opt["kind"] == "step"]
    seen = set(st.loc[(st["foreach_ops"] > 0) | (st["fused_ops"] > 0) | (st["multi_tensor_kernels"] > 0), "optimizer"])
    if fused_ops is not None and len(fused_ops):
        ops = {str(n).removeprefix("aten::_fused_").rstrip("_").lower() for n in fused_ops["name"]}
        seen |= {name for name in set(st["optimizer"]) if str(name).lower() in ops}
    return seen


def _per_parameter(row) -> bool:
    if row["single_tensor_ops"] > 0:
        return True
    if "fused" in str(row["optimizer"]).lower():
        return False
    return row["foreach_ops"] == 0 and row["fused_ops"] == 0 and row["multi_tensor_kernels"] == 0


def _rank(ra, config, report):
    opt = ra.tables.get("optimizer")
    s = ra.steps
    if opt is None or not len(opt) or not len(s):
        return None
    fused_seen = _fused_elsewhere(opt, ra.tables.get("fused_optimizer_ops"))
    opt = opt[opt["step"].isin(s["step"])]
    # A call cut by the end of the recording may lack its foreach / fused ops: it proves nothing.
    complete = opt["truncated"] == 0 if "truncated" in opt else True
    st = opt[(opt["kind"] == "step") & (opt["ops"] >= config.optimizer_min_ops) & complete
             & ~opt["optimizer"].isin(fused_seen)]
    single = st[st.apply(_per_parameter, axis=1)] if len(st) else st
    zg = opt[(opt["kind"] == "zero_grad") & (opt["zero_ops"] > 0)]
    if not len(single) and not len(zg):
        return None
    nsteps = len(s)
    cpu_step = float(s["cpu_step_us"].mean()) if "cpu_step_us" in s else float(s["wall_us"].mean())
    flagged_cpu = (float(single["cpu_us"].sum()) + float(zg["cpu_us"].sum())) / nsteps
    parts = {}
    if len(single):
        g = single.groupby("optimizer")[["calls", "cpu_us", "ops", "foreach_ops", "fused_ops", "single_tensor_ops",
                                          "kernel_count", "multi_tensor_kernels", "gpu_us"]].sum() / nsteps
        parts["per_parameter_step"] = {k: ParameterSteps(**v) for k, v in by_row(g).items()}
    if len(zg):
        g = zg.groupby("optimizer")[["calls", "cpu_us", "zero_ops", "kernel_count", "gpu_us"]].sum() / nsteps
        parts["zero_grad_fills"] = {k: ZeroFills(**v) for k, v in by_row(g).items()}
    return RankEvidence(rank=ra.rank, basis=ra.basis, share_of_step_cpu=flagged_cpu / max(cpu_step, 1e-9),
                        flagged_cpu_us_per_step=flagged_cpu,
                        steps=sorted(int(x) for x in set(single["step"]) | set(zg["step"])), **parts)


def _summary(hits, w, report, config):
    e, per_rank = w.ev, [h.ev for h in hits]
    kinds = sorted({k for x in per_rank for k, part in (("per-parameter", x.per_parameter_step),
                                                         ("zero-fill", x.zero_grad_fills)) if part})
    parts = []
    if "per-parameter" in kinds:
        name, v = next(iter(e.per_parameter_step.items())) if e.per_parameter_step else ("optimizer", None)
        ops, kernels = (v.ops, v.kernel_count) if v is not None else (0, 0)
        what = f"{ops:.0f} ops" + (f", {kernels:.0f} kernels" if kernels else "")
        parts.append(f"{shown(name)} steps one parameter at a time ({what} per step)")
    if "zero-fill" in kinds:
        parts.append("zero_grad fills gradients with zeros")
    title = "; ".join(parts) + f" ({100 * e.share_of_step_cpu:.1f} % of the step's CPU time, rank {e.rank})"
    ev = Evidence(per_rank=per_rank, patterns=kinds, min_ops=config.optimizer_min_ops)
    return ev, title, max(x.flagged_cpu_us_per_step for x in per_rank)


RULE = Rule(
    id="optimizer-not-fused",
    title="Per-parameter optimizer step or zero-filled gradients",
    needs=Needs(steps=("step", "wall_us"), tables=("optimizer",)),
    claim=Claim(order=110, gpu=Estimate(("launch",)), cpu=Estimate(("optimizer",)),
                estimate_key="flagged_cpu_us_per_step"),
    label="per-parameter optimizer",
    thresholds=("optimizer_min_ops",),
    evidence=Evidence, fix=fix, check=PerRank(_rank, _summary, worst=lambda e: e.share_of_step_cpu),
)
