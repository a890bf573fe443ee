"""What a fix must not say about a run whose setup says otherwise: shared by the fix-fits-setup and twins tests."""

from __future__ import annotations

import re


def contradictions(fix: str, setup: dict) -> list[str]:
    """What in ``fix`` the setup says is wrong for this run (empty: the fix fits)."""
    out = []
    code = "\n".join(line.split("#", 1)[0] for line in fix.splitlines())  # advice is code; comments explain
    opt = setup["optimizer"]
    for cls in re.findall(r"torch\.optim\.(\w+)\(", code):
        if not opt["present"]:
            out.append(f"optimizer advice ({cls}) where no optimizer step ran")
        elif opt["name"] and cls != opt["name"]:
            out.append(f"torch.optim.{cls} for a run on {opt['name']}")
        if "fused=True" in code and opt["fused"]:
            out.append("fused=True for a run already fused")
    if setup["compile"]["compiled"] and re.search(r"torch\.compile\(model\)", code):
        out.append("torch.compile for a compiled run")
    graphs = setup["graph_launches"] > 0 or setup["compile"]["mode"] == "reduce-overhead"
    if graphs and (re.search(r"reduce-overhead|torch\.cuda\.graph|CUDAGraph", code)):
        out.append("CUDA graphs for a program that replays them")
    if setup["device"] == "cpu" and re.search(r"pin_memory|\.cuda\(|torch\.cuda|non_blocking", code):
        out.append("GPU advice on a CPU run")
    pinned = setup["loader"]["pin_memory"] is True or (
        setup["copies"]["h2d_pinned_count"] and not setup["copies"]["h2d_pageable_count"])
    if pinned and re.search(r"DataLoader\([^)]*pin_memory=True", code, re.S):
        out.append("pin_memory=True where the copies are already pinned")
    for n in re.findall(r"num_workers=(\d+)", code):
        if setup["cpu_count"] and int(n) > setup["cpu_count"]:
            out.append(f"num_workers={n} on {setup['cpu_count']} cores")
    if "ddp" not in (setup["parallelism"] or "").split("+") and re.search(
            r"DistributedDataParallel|bucket_cap_mb|no_sync", code):
        out.append(f"DDP advice for a run with parallelism={setup['parallelism']}")
    if setup["device"] == "cpu" and re.search(r"per GPU", fix):
        out.append("a rule of thumb per GPU on a CPU-only run")
    return out
