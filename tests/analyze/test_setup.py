"""The run's setup (analyze/setup.py), on every fixture and public trace, against what the test reads from the raw
trace JSON itself (standard library only): optimizer ops, compile markers, graph launches, copies, metadata."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from traceinspect.config import Config
from traceinspect.run import report_folder
from sweeps import FIXTURE_FOLDERS, PUBLIC_FOLDERS

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = ROOT.parent / "shared" / "traces" / "public"
CACHED = Config(workers=1)


def _raw(folder: Path) -> list[dict]:
    out = []
    for path in sorted(folder.glob("*.json*")):
        with (gzip.open if path.name.endswith(".gz") else open)(path, "rt") as f:
            out.append(json.load(f))
    return out


def _complete(trace: dict) -> list[dict]:
    return [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and isinstance(e.get("name"), str)]


def _report(folder: Path) -> dict:
    """The report, through the session's cache (the fix test reads the same folders)."""
    return report_folder(folder, CACHED).to_dict()


def _ids(p: Path) -> str:
    return f"{p.parent.name}/{p.name}"


def expected(traces: list[dict]) -> dict:
    """What the setup must say, counted here from the raw events of one rank's files."""
    ev = [e for t in traces for e in _complete(t)]
    # Older Kineto names the categories Operator / Runtime / Kernel / Memcpy.
    cat = lambda e: {"operator": "cpu_op"}.get(str(e.get("cat", "")).lower(), str(e.get("cat", "")).lower())  # noqa: E731
    spans = [e for e in ev if cat(e) in ("cpu_op", "user_annotation")]
    steps = [e for e in spans if re.fullmatch(r"Optimizer\.step#\w+\.step", e["name"])]
    classes = {e["name"].split("#", 1)[1].rsplit(".", 1)[0] for e in steps}
    inside = [o for s in steps for o in spans
              if cat(o) == "cpu_op" and o.get("tid") == s.get("tid") and o is not s
              and s["ts"] <= o["ts"] and o["ts"] + o["dur"] <= s["ts"] + s["dur"]]
    fused_any = any(cat(e) == "cpu_op" and re.fullmatch(r"aten::_fused_[a-z]+_?", e["name"]) for e in ev)
    gpu = [e for e in ev if cat(e) in ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset")]
    runtime = [e for e in ev if cat(e) in ("cuda_runtime", "cuda_driver", "runtime")]
    meta = traces[0].get("traceinspect") or {}
    dist = traces[0].get("distributedInfo") or {}
    exp = {
        "device": "cpu" if not gpu else "rocm" if any(e["name"].startswith("hip") for e in runtime) else "cuda",
        "optimizer.present": bool(steps),
        "optimizer.name": classes.pop() if len(classes) == 1 else None,
        "optimizer.steps": len(steps),
        "graph_launches": sum(1 for e in runtime if e["name"] in ("cudaGraphLaunch", "hipGraphLaunch", "cuGraphLaunch")),
        "compile.compiled": any(e["name"].startswith(("Torch-Compiled Region", "CompiledFunction")) for e in spans)
        or any(cat(e) == "kernel" and e["name"].startswith("triton_") for e in ev),
        "parallelism_ddp": any(e["name"].startswith("DistributedDataParallel.") for e in spans),
        "world_size": dist.get("world_size", meta.get("world_size")),
        "cpu_count": meta.get("cpu_count"),
    }
    if steps:
        fused = fused_any or any(re.fullmatch(r"aten::_fused_[a-z]+_?", o["name"]) for o in inside) \
            or next(iter({e["name"] for e in steps})).split("#")[1].startswith("Fused")
        exp["optimizer.fused"] = True if fused else (False if inside else None)
        if inside and not fused:
            exp["optimizer.foreach"] = any(o["name"].startswith("aten::_foreach_") and o["name"] != "aten::_foreach_zero_"
                                           for o in inside)
    if isinstance(meta.get("amp_dtype"), str):
        exp["amp_dtype"] = meta["amp_dtype"]
    elif meta.get("workload"):  # the reference workload states its dtype; null there is fp32
        exp["amp_dtype"] = "none"
    if "workload" in meta:
        dl = meta.get("dataloader") or {}
        if dl:
            exp["loader.num_workers"] = dl.get("num_workers")
            exp["loader.pin_memory"] = dl.get("pin_memory")
    if gpu:
        exp["pinned_h2d_any"] = any("HtoD" in e["name"] and "Pinned" in e["name"] for e in gpu)
        exp["pageable_h2d_any"] = any("HtoD" in e["name"] and "Pageable" in e["name"] for e in gpu)
    return exp


def _get(setup: dict, key: str):
    if key == "parallelism_ddp":
        return setup["parallelism"] == "ddp"
    if key == "pinned_h2d_any":
        return setup["copies"]["h2d_pinned_count"] > 0
    if key == "pageable_h2d_any":
        return setup["copies"]["h2d_pageable_count"] > 0
    node = setup
    for part in key.split("."):
        node = node[part]
    return node


def _check(folder: Path) -> None:
    rep = _report(folder)
    raw = _raw(folder)
    for rd in rep["ranks"]:
        setup = rd["setup"]
        assert setup is not None, rd["errors"]
        mine = [t for t, p in zip(raw, sorted(folder.glob("*.json*"))) if p.name in {Path(f).name for f in rd["files"]}]
        exp = expected(mine or raw)
        for key, want in exp.items():
            got = _get(setup, key)
            if key in ("pinned_h2d_any", "pageable_h2d_any") and not want:
                assert not got, (key, got)  # copies outside every step are not in the setup's step counts
                continue
            if key in ("pinned_h2d_any", "pageable_h2d_any"):
                continue  # a copy may lie outside every step: only "none in the file" is exact
            assert got == want, (folder.name, rd["rank"], key, got, want)
        for key in ("cpu_count", "world_size", "backend", "amp_dtype"):
            assert (setup[key] is None) == (key in setup["not_recorded"]), key


@pytest.mark.slow  # a sweep over every trace at hand
@pytest.mark.parametrize("folder", FIXTURE_FOLDERS, ids=_ids)
def test_setup_matches_raw_events_on_fixtures(folder):
    _check(folder)


@pytest.mark.slow  # a sweep over every trace at hand
@pytest.mark.parametrize("folder", PUBLIC_FOLDERS or [PUBLIC / "absent"], ids=lambda p: p.name)
def test_setup_matches_raw_events_on_public_traces(folder):
    if not folder.exists():
        pytest.skip(f"public traces not present at {PUBLIC} (they live in ../shared, outside the project)")
    _check(folder)


def test_named_setups():
    """The setups the fixtures were captured with (fixtures/README.md), read back."""
    by = {f.parent.name + "/" + f.name: f for f in FIXTURE_FOLDERS}
    s = _report(by["gpu_pairs/s2_small_compiled"])["ranks"][0]["setup"]
    assert s["compile"]["compiled"] and s["compile"]["mode"] == "default" and s["optimizer"]["fused"]
    assert s["amp_dtype"] == "bfloat16" and s["loader"]["pin_memory"] is True and s["parallelism"] == "ddp"
    s = _report(by["gpu_pairs/graph_replay"])["ranks"][0]["setup"]
    assert s["graph_launches"] > 0 and not s["optimizer"]["present"] and s["world_size"] is None
    s = _report(by["gpu/single_adamw"])["ranks"][0]["setup"]
    assert s["optimizer"] == {**s["optimizer"], "name": "AdamW", "fused": False, "foreach": False}
    s = _report(by["cpu/fetch_stub"])["ranks"][0]["setup"]
    assert s["device"] == "cpu" and s["copies"]["h2d_pinned_count"] is None and s["optimizer"]["name"] == "SGD"


def test_setup_of_a_cpu_ddp_capture(cpu_clean_run):
    """A CPU DDP capture made now: gloo, two ranks, and the cores the capture recorded."""
    rep = _report(cpu_clean_run)
    for rd in rep["ranks"]:
        s = rd["setup"]
        raw = _raw(cpu_clean_run)[0]["traceinspect"]
        assert s["device"] == "cpu" and s["parallelism"] == "ddp" and s["backend"] == "gloo" and s["world_size"] == 2
        assert s["cpu_count"] == raw["cpu_count"] and s["cpu_count"] >= 1


def test_setup_survives_the_cache(tmp_path):
    """A rank's analysis read back from the cache carries an equal setup record (the same frozen type)."""
    from traceinspect.run.local import rank_task

    folder = ROOT / "fixtures" / "gpu_pairs" / "s2_small_compiled"
    files = sorted(str(p) for p in folder.glob("*.json*"))
    cfg = Config(use_cache=True, workers=1, cache_dir=str(tmp_path))
    first = rank_task(files, cfg.options, cfg.limits, cfg.thresholds, rank=0)[0][0].setup
    assert list(tmp_path.rglob("rank-*.json"))  # written to the cache ...
    second = rank_task(files, cfg.options, cfg.limits, cfg.thresholds, rank=0)[0][0].setup
    assert second == first and second is not first and type(second.optimizer) is type(first.optimizer)
