"""Tests of capturing: real 2-rank CPU (gloo) traces, the metadata in them, and every bad-use error.

The trace assertions parse the files with the standard library only, so they
check what torch wrote, not what traceinspect's loader makes of it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cpu_capture import SLOW_ITEM_DELAY_MS, WORKER_ITEM_DELAY_MS, load_trace, trace_files

from traceinspect.capture import profiling as cap
from traceinspect.capture import workload

NAME_RE = re.compile(r"^rank(\d+)\.\d+\.pt\.trace\.json\.gz$")
HAS_TORCH = importlib.util.find_spec("torch") is not None
_torch_present = pytest.mark.skipif(not HAS_TORCH, reason="torch is needed to capture")


def needs_torch(test):
    """A test that captures with torch: skipped without it, and in the ``capture`` tier."""
    return pytest.mark.capture(_torch_present(test))

ROOT = Path(__file__).resolve().parents[2]


def _x_events(trace: dict) -> list[dict]:
    return [e for e in trace["traceEvents"] if e.get("ph") == "X"]


def _step_numbers(trace: dict) -> list[int]:
    return sorted(int(e["name"].split("#")[1]) for e in _x_events(trace) if e["name"].startswith("ProfilerStep#"))


def _thread_names(trace: dict) -> dict[int, set[str]]:
    names: dict[int, set[str]] = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names.setdefault(e["tid"], set()).add(e["args"]["name"])
    return names


def _cli(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the capture CLI in a fresh interpreter, as a user would."""
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = str(ROOT) + os.pathsep + full_env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "traceinspect.cli.capture", *args], capture_output=True,
                          text=True, env=full_env, timeout=timeout, cwd=ROOT)


# --------------------------------------------------------------------------- real 2-rank captures


@needs_torch
def test_one_gzipped_file_per_rank(cpu_clean_run: Path) -> None:
    files = trace_files(cpu_clean_run)
    ranks = sorted(int(NAME_RE.match(p.name).group(1)) for p in files if NAME_RE.match(p.name))
    assert [p.name for p in files if not NAME_RE.match(p.name)] == []
    assert ranks == [0, 1]


@needs_torch
def test_schedule_steps_and_distributed_info(cpu_clean_run: Path) -> None:
    for path in trace_files(cpu_clean_run):
        trace = load_trace(path)
        assert _step_numbers(trace) == [2, 3, 4]  # wait=1, warmup=1, active=3
        info = trace["distributedInfo"]
        assert info["world_size"] == 2 and info["backend"] == "gloo"
        assert info["rank"] == int(NAME_RE.match(path.name).group(1))


@needs_torch
def test_metadata_records_the_job(cpu_clean_run: Path) -> None:
    for path in trace_files(cpu_clean_run):
        trace = load_trace(path)
        meta = trace[cap.METADATA_KEY]
        assert meta["schema"] == cap.METADATA_SCHEMA
        assert meta["rank"] == trace["distributedInfo"]["rank"] and meta["world_size"] == 2
        assert {k: meta["capture"][k] for k in ("wait", "warmup", "active", "repeat", "skip_first")} == \
            {"wait": 1, "warmup": 1, "active": 3, "repeat": 1, "skip_first": 0}
        assert meta["capture"]["record_shapes"] is False and meta["capture"]["activities"] == ["cpu"]
        assert meta["dataloader"]["num_workers"] == 0 and meta["dataloader"]["batch_size"] == 8
        assert meta["dataloader"]["prefetch_factor"] is None  # no workers, no prefetching
        ddp = meta["ddp"]
        assert ddp["bucket_cap_mb"] == 25.0
        assert (ddp["gradient_as_bucket_view"], ddp["static_graph"], ddp["find_unused_parameters"]) == \
            (False, False, False)
        assert meta["accumulation_steps"] == 4 and meta["no_sync"] is True
        # bf16 autocast is a GPU-only knob: the optimized preset leaves it off on CPU (workload.GPU_ONLY)
        assert meta["amp_dtype"] is None and meta["grad_scaler"] is False
        assert meta["workload"]["preset"] == "optimized" and meta["workload"]["backend"] == "gloo"
        assert meta["workload"]["optimizer_impl"] == "foreach" and meta["workload"]["pin_memory"] is False


@needs_torch
def test_trace_shows_gloo_collectives_and_the_loader(cpu_clean_run: Path) -> None:
    trace = load_trace(trace_files(cpu_clean_run)[0])
    events = _x_events(trace)
    threads = _thread_names(trace)
    main_tid = next(e["tid"] for e in events if e["name"].startswith("ProfilerStep#"))
    gloo = [e for e in events if e["name"] == "gloo:all_reduce"]
    assert gloo and all(e["cat"] == "user_annotation" for e in gloo)
    # the collective runs on gloo's own threads, not on the training thread
    assert all(e["tid"] != main_tid and any("pt_gloo_runloop" in n for n in threads[e["tid"]]) for e in gloo)
    enqueue = [e for e in events if e["name"] == "c10d::allreduce_"]
    assert len(enqueue) == 3 and all(e["tid"] == main_tid for e in enqueue)  # no_sync: one per step
    loader = [e for e in events if e["name"].startswith("enumerate(DataLoader)#")]
    assert {e["name"] for e in loader} == {"enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"}
    assert len(loader) == 12  # 3 steps x 4 micro-batches
    names = {e["name"] for e in events}
    assert {"DistributedDataParallel.forward", "Optimizer.step#AdamW.step"} <= names


@needs_torch
@pytest.mark.timing
def test_slow_loader_dominates_the_step(cpu_slow_loader_run: Path) -> None:
    for path in trace_files(cpu_slow_loader_run):
        trace = load_trace(path)
        events = _x_events(trace)
        step_us = sum(e["dur"] for e in events if e["name"].startswith("ProfilerStep#"))
        loader_us = sum(e["dur"] for e in events if e["name"].startswith("enumerate(DataLoader)#"))
        assert loader_us > 0.4 * step_us, (loader_us, step_us)
        assert trace[cap.METADATA_KEY]["workload"]["item_delay_ms"] == SLOW_ITEM_DELAY_MS


@needs_torch
def test_cli_repeat_two_windows_per_rank(tmp_path: Path) -> None:
    out = tmp_path / "repeat"
    res = _cli("capture", "--preset", "baseline", "--nproc", "2", "--out", str(out), "--repeat", "2",
               "--wait", "0", "--warmup", "1", "--active", "2", "--set", "batch_size=8",
               "--set", "num_workers=0", "--set", "mlp_hidden=512")
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"traceinspect report {out}" in res.stdout
    files = trace_files(out)
    assert len(files) == 4
    windows: dict[int, list[list[int]]] = {}
    for path in files:
        trace = load_trace(path)
        rank = int(NAME_RE.match(path.name).group(1))
        windows.setdefault(rank, []).append(_step_numbers(trace))
        assert trace[cap.METADATA_KEY]["capture"]["repeat"] == 2  # metadata in every window
        assert trace[cap.METADATA_KEY]["ddp"]["bucket_cap_mb"] == 1.0
        assert trace[cap.METADATA_KEY]["no_sync"] is False
    expected = cap.recorded_step_numbers(wait=0, warmup=1, active=2, repeat=2)
    assert expected == [[1, 2], [4, 5]]
    assert {r: sorted(w) for r, w in windows.items()} == {0: expected, 1: expected}


# --------------------------------------------------------------------------- the context in-process


@needs_torch
def test_profile_in_process_writes_metadata_and_files(tmp_path: Path) -> None:
    import torch

    ds = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.zeros(64, dtype=torch.long))
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=0)
    model = torch.nn.Linear(4, 2)
    with cap.profile(tmp_path, wait=0, warmup=1, active=2, dataloader=loader, accumulation_steps=2,
                     amp_dtype=torch.bfloat16, extra={"run": "unit"}, verbose=False) as prof:
        prof.update_metadata(extra={"late": True})
        for x, _ in loader:
            model(x).sum().backward()
            prof.step()
        assert prof.profiler is not None and hasattr(prof, "key_averages")  # torch's profiler is reachable
    assert prof.steps == 16 and len(prof.files) == 1
    assert prof.files == trace_files(tmp_path)
    meta = load_trace(prof.files[0])[cap.METADATA_KEY]
    assert meta["extra"] == {"run": "unit", "late": True}
    assert meta["dataloader"]["batch_size"] == 4 and meta["ddp"] is None and meta["world_size"] == 1
    assert meta["accumulation_steps"] == 2 and meta["amp_dtype"] == "bfloat16"


@needs_torch
def test_metadata_reaches_every_window_without_preset_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch < 2.3 has no preset_metadata_json: the per-step add_metadata_json path must cover each window."""
    import torch.profiler.profiler as tpp

    owner = next(c for c in tpp.profile.__mro__ if "preset_metadata_json" in vars(c))
    monkeypatch.delattr(owner, "preset_metadata_json")
    with cap.profile(tmp_path, wait=1, warmup=1, active=1, repeat=2, extra={"path": "fallback"},
                     verbose=False) as prof:
        for _ in range(6):
            prof.step()
    assert len(prof.files) == 2
    for path in prof.files:
        assert load_trace(path)[cap.METADATA_KEY]["extra"] == {"path": "fallback"}


@needs_torch
def test_too_short_loop_says_how_many_steps(tmp_path: Path) -> None:
    with pytest.raises(cap.CaptureError) as err:
        with cap.profile(tmp_path / "short", wait=1, warmup=1, active=3, verbose=False) as prof:
            for _ in range(3):
                prof.step()
    msg = str(err.value)
    assert "called prof.step() 3 time(s)" in msg and "needs 5" in msg and "\n" not in msg
    with pytest.warns(UserWarning, match="needs 5"):
        with cap.profile(tmp_path / "lenient", wait=1, warmup=1, active=3, strict=False, verbose=False) as prof:
            prof.step()


@needs_torch
def test_loop_error_is_not_masked(tmp_path: Path) -> None:
    with pytest.raises(KeyError):
        with cap.profile(tmp_path, verbose=False):
            raise KeyError("from the training loop")


def test_schedule_helpers() -> None:
    assert cap.required_steps(1, 1, 3) == 5
    assert cap.required_steps(wait=2, warmup=1, active=2, repeat=3, skip_first=4) == 19
    assert cap.required_steps(1, 1, 3, repeat=0) == 5
    assert cap.recorded_step_numbers(1, 1, 3) == [[2, 3, 4]]


@pytest.mark.parametrize("kwargs, text", [
    ({"active": 0}, "active must be >= 1"),
    ({"wait": -1}, "wait must be >= 0"),
    ({"repeat": -2}, "repeat must be >= 0"),
    ({"warmup": 1.5}, "warmup must be an integer"),
])
def test_bad_schedule_is_a_capture_error(kwargs: dict, text: str, tmp_path: Path) -> None:
    with pytest.raises(cap.CaptureError, match=text):
        cap.required_steps(**kwargs)
    with pytest.raises(cap.CaptureError, match=text):
        cap.profile(tmp_path, **kwargs)
    assert issubclass(cap.CaptureError, ValueError)


def test_unwritable_folder_fails_at_once(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(cap.CaptureError, match="cannot create the trace folder"):
        cap.profile(blocker / "traces")
    with pytest.raises(cap.CaptureError, match="is not a folder"):
        cap._check_writable(blocker)


def test_describe_helpers_read_the_objects() -> None:
    class FakeLoader:
        num_workers, pin_memory, persistent_workers, prefetch_factor, batch_size, drop_last = 4, True, True, 3, 32, True
        sampler = None

    class FakeDDP:
        bucket_bytes_cap = 25 * 1024 * 1024
        first_bucket_bytes_cap = 1024 * 1024
        gradient_as_bucket_view, static_graph, find_unused_parameters = True, False, True

    assert cap.describe_dataloader(FakeLoader()) == {
        "num_workers": 4, "pin_memory": True, "persistent_workers": True, "prefetch_factor": 3,
        "batch_size": 32, "drop_last": True, "sampler": None}
    assert cap.describe_ddp(FakeDDP()) == {"bucket_cap_mb": 25.0, "first_bucket_cap_mb": 1.0,
                                           "gradient_as_bucket_view": True, "static_graph": False,
                                           "find_unused_parameters": True}
    assert cap.describe_ddp(object()) is None and cap.describe_dataloader(None) is None
    assert [cap.amp_dtype_name(v) for v in ("torch.bfloat16", "fp16", None, "none")] == \
        ["bfloat16", "float16", None, None]


# --------------------------------------------------------------------------- workload knobs


def test_every_knob_is_typed_and_commented() -> None:
    table = workload.knob_table()
    assert len(table) == len(workload.WorkloadConfig.__dataclass_fields__)
    assert [name for name, _, _, comment in table if not comment] == []
    assert {typ for _, typ, _, _ in table} <= {"int", "float", "bool", "str"}


def test_overrides_are_typed_from_the_dataclass() -> None:
    got = workload.parse_overrides(["num_workers=4", "pin_memory=yes", "bucket_cap_mb=2.5", "amp=bf16",
                                    "no-sync=0"])
    assert got == {"num_workers": 4, "pin_memory": True, "bucket_cap_mb": 2.5, "amp": "bf16", "no_sync": False}
    for bad, text in (("nosuch=1", "unknown knob 'nosuch'"), ("batch_size=abc", "batch_size takes an integer"),
                      ("pin_memory=maybe", "pin_memory takes true/false"), ("amp", "--set takes key=value")):
        with pytest.raises(workload.KnobError, match=re.escape(text)):
            workload.parse_overrides([bad])
    with pytest.raises(workload.KnobError, match="amp must be one of"):
        workload.config_from_args("optimized", ["amp=fp8"], cuda=False)


def test_presets_follow_the_device() -> None:
    cpu = workload.preset_config("optimized", cuda=False, cpus_per_rank=16)
    gpu = workload.preset_config("optimized", cuda=True, cpus_per_rank=1)
    assert (cpu.num_workers, cpu.pin_memory, cpu.optimizer_impl, cpu.tf32) == (4, False, "foreach", False)
    assert (gpu.num_workers, gpu.pin_memory, gpu.optimizer_impl, gpu.tf32) == (1, True, "fused", True)
    base = workload.preset_config("baseline", cuda=True, cpus_per_rank=8)
    assert (base.num_workers, base.pin_memory, base.non_blocking, base.bucket_cap_mb, base.amp,
            base.accum_steps, base.no_sync) == (2, False, False, 1.0, "none", 4, False)
    assert (gpu.bucket_cap_mb, gpu.amp, gpu.accum_steps, gpu.no_sync, gpu.persistent_workers,
            gpu.non_blocking, gpu.clip_grad) == (25.0, "bf16", 4, True, True, True, 1.0)
    assert workload.resolve_auto(cpu, cuda=False).batch_size == 16
    with pytest.raises(workload.KnobError, match="unknown preset"):
        workload.preset_config("fastest")


# --------------------------------------------------------------------------- CLI bad use


@pytest.mark.parametrize("args, text", [
    (["--set", "nosuch=1"], "unknown knob 'nosuch'"),
    (["--set", "batch_size=abc"], "batch_size takes an integer"),
    (["--set", "amp=fp8"], "amp must be one of none, bf16, fp16"),
    (["--active", "0"], "active must be >= 1"),
    (["--wait", "-1"], "wait must be >= 0"),
    (["--steps", "3"], "needs 5 steps"),
    (["--nproc", "0"], "--nproc must be >= 1"),
])
def test_cli_bad_use_is_one_line(args: list[str], text: str, tmp_path: Path) -> None:
    res = _cli("capture", "--out", str(tmp_path / "out"), *args)
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: ") and text in lines[0], res.stderr


def test_cli_unwritable_out_and_existing_traces(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    res = _cli("capture", "--out", str(blocker / "sub"))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "cannot create the trace folder" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    old = tmp_path / "old"
    old.mkdir()
    (old / "rank0.1.pt.trace.json.gz").write_bytes(b"")
    res = _cli("capture", "--out", str(old))
    assert res.returncode == 2 and "already holds 1 trace file(s)" in res.stderr and "--overwrite" in res.stderr


@pytest.mark.parametrize("command", ["capture", "demo"])
def test_cli_without_torch(command: str, tmp_path: Path) -> None:
    code = ("import sys; sys.modules['torch'] = None; from traceinspect.cli.capture import standalone_main; "
            f"standalone_main([{command!r}, '--out', {str(tmp_path / 'o')!r}])")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip() == ("Error: capturing traces needs torch, which is not installed: "
                                  "pip install 'traceinspect[capture]'")


def test_capture_modules_do_not_import_torch_or_the_analyzer() -> None:
    code = ("import sys; import traceinspect.capture, traceinspect.capture.workload, traceinspect.cli.capture; "
            "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith(('msgspec', 'pandas', 'pyarrow'))); "
            "print(bad)")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


# --------------------------------------------------------------------------- demo


def test_render_knobs() -> None:
    from rich.console import Console

    from traceinspect.cli.capture import render_knobs

    console = Console(record=True, width=120)
    render_knobs([("no_sync", False, True), ("pin_memory", False, True)], console=console)
    text = console.export_text()
    assert "no_sync" in text and "pin_memory" in text and "True" in text


@needs_torch
@pytest.mark.timing
@pytest.mark.skipif(importlib.util.find_spec("traceinspect.run.api") is None,
                    reason="traceinspect.run.api (the analyzer) is not there yet")
def test_demo_end_to_end(tmp_path: Path) -> None:
    res = _cli("demo", "--out", str(tmp_path / "demo"), "--nproc", "2", "--set", "num_workers=0",
               "--set", "mlp_hidden=1024", "--rounds", "3", "--budget", "150", env={"COLUMNS": "80"}, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    # In an 80-column terminal, as the README's first command runs: no line the terminal would have to wrap (but
    # for a command naming this test's long folder, which is not cut).
    wide = [line for line in res.stdout.splitlines() if len(line) > 80 and str(tmp_path) not in line]
    assert not wide, wide
    assert len(trace_files(tmp_path / "demo" / "baseline")) == 2
    assert len(trace_files(tmp_path / "demo" / "optimized")) == 2
    assert "What the optimized preset changes" in res.stdout
    # The step time's verdict over the rounds, in its table: never "slower" on a busy machine, and the fixes pay on
    # a quiet one.
    (verdict,) = re.findall(r"^\s*all \d+ .*$", res.stdout, flags=re.M)
    assert verdict.rstrip().endswith(("faster", "cannot tell: machine busy")), res.stdout
    # Per category, traceinspect diff's changes and the findings that went away.
    assert "Findings" in res.stdout and "gone:" in res.stdout and "comm" in res.stdout


# --------------------------------------------------------------------------- failures reported in one line


def test_failure_reason_picks_the_root_cause() -> None:
    from traceinspect.cli.capture import _failure_reason

    log = ("W1129 torch/distributed/run.py: setting OMP_NUM_THREADS\n"
           "[rank1]: Traceback (most recent call last):\n"
           "[rank1]:   File \"x.py\", line 1, in <module>\n"
           "[rank1]: RuntimeError: Gloo connectFullMesh failed\n"
           "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n")
    assert _failure_reason(log) == "RuntimeError: Gloo connectFullMesh failed"
    ours = "noise\ntraceinspect: error (rank 1): the loop called prof.step() 3 time(s)\n" + log
    assert _failure_reason(ours) == "the loop called prof.step() 3 time(s)"


@needs_torch
def test_workload_too_short_run_is_one_line(tmp_path: Path) -> None:
    """Single process (no torchrun): the capture context's own check fires at the end of the loop."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    res = subprocess.run([sys.executable, "-m", "traceinspect.capture.workload", "--out", str(tmp_path), "--steps", "3",
                          "--set", "batch_size=4", "--set", "num_workers=0", "--set", "mlp_hidden=64"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("traceinspect: error")]
    assert errors == ["traceinspect: error (rank 0): the loop called prof.step() 3 time(s) but the profiler "
                      "schedule (skip_first=0, wait=1, warmup=1, active=3, repeat=1) needs 5; only a partial "
                      "trace was written (1 file(s)) -- run at least 5 steps or lower wait/warmup/active"]


@needs_torch
@pytest.mark.timing
def test_loader_probe_and_worker_timing_are_recorded(cpu_capture_factory) -> None:
    """Two workers, each sample sleeps 10 ms, batches of 8: a worker needs >= 80 ms a batch, so the pair delivers one
    every >= 40 ms; the probe (before the loop) and the workers' own timing (during the window) both see it."""
    batch_us = 8 * WORKER_ITEM_DELAY_MS * 1000
    folder = cpu_capture_factory(preset="optimized", nproc=1,
                                 overrides={"num_workers": 2, "item_delay_ms": WORKER_ITEM_DELAY_MS, "mlp_hidden": 256})
    for path in trace_files(folder):
        meta = load_trace(path)[cap.METADATA_KEY]
        probe, timing = meta["loader_probe"], meta["loader_timing"]
        assert probe["num_workers"] == 2 and probe["batches"] >= 6
        assert batch_us / 2 * 0.9 <= probe["period_us"] <= batch_us / 2 * 4
        assert timing["batches"] >= 1 and timing["busy_us_mean"] >= batch_us * 0.9
        assert timing["period_us"] == pytest.approx(timing["busy_us_mean"] / 2)
        # The process's threads over the same window: the loop's own thread is there, and no thread was on a CPU
        # longer than the window lasted; the loop's thread ran at least its recorded steps' own CPU ops.
        th = meta["process_threads"]
        (main,) = [t for t in th["threads"] if t["main"]]
        assert all(0 < t["cpu_us"] <= th["interval_us"] * 1.02 for t in th["threads"])
        ops = [e for e in load_trace(path)["traceEvents"] if e.get("cat") == "cpu_op" and e.get("ph") == "X"
               and e.get("name") == "aten::addmm"]
        assert main["cpu_us"] >= 0.5 * sum(float(e["dur"]) for e in ops) > 0
    import traceinspect

    (rank,) = traceinspect.load_trace(folder).ranks
    assert rank.metadata["loader_probe"]["period_us"] == probe["period_us"]
