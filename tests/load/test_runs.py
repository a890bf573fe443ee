"""Runs, ranks and windows of real captures, alone and side by side in one folder."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from traceinspect.config import Config
from traceinspect.load.discover import list_traces
from traceinspect.load.reader import load, plan_folder
from traceinspect.run.api import analyze_path

from cpu_capture import load_trace
from load_helpers import GPU, PAIRS, ROOT, copy_run, names

NOCACHE = Config(use_cache=False, workers=1)


def plan_of(folder: Path):
    plan, bad = plan_folder(list_traces(folder).files)
    assert not bad
    return plan


def first_ts_ns(path: Path) -> float:
    raw = load_trace(path)
    return raw.get("baseTimeNanoseconds", 0) + 1000 * min(e["ts"] for e in raw["traceEvents"] if e.get("ph") == "X")


def test_two_captures_of_one_job_in_one_folder(tmp_path):
    a = copy_run(PAIRS / "small_clean", tmp_path)
    b = copy_run(PAIRS / "small_clean_b", tmp_path)
    newer, older = (b, a) if first_ts_ns(b[0]) > first_ts_ns(a[0]) else (a, b)
    d = analyze_path(tmp_path, NOCACHE).to_dict()
    runs = d["runs"]
    assert (runs["count"], runs["selected"]) == (2, 2)
    assert names(d["ranks"][0]["files"]) == names(newer)
    assert [r["ranks"] for r in runs["runs"]] == [[0], [0]]
    assert runs["other_runs_files"] == 1 and d["skipped"] == []
    assert "run 2 of 2" in runs["summary"] and "--run N" in runs["summary"]
    # Each capture's 8 steps once: nothing merged by step number.
    assert len(d["ranks"][0]["steps"]) == 8
    old = analyze_path(tmp_path, NOCACHE, run=1).to_dict()
    assert names(old["ranks"][0]["files"]) == names(older) and old["runs"]["selected"] == 1


@pytest.mark.slow  # sixteen runs read and told apart
def test_folder_of_sixteen_runs_in_sub_folders(tmp_path):
    shutil.copytree(GPU, tmp_path / "gpu")
    subs = sorted(p for p in (tmp_path / "gpu").iterdir() if p.is_dir())
    plan = plan_of(tmp_path / "gpu")
    assert len(plan.runs) == len(subs) == 16
    # Every run is one sub-folder, and the order is the order of the captures' times.
    assert sorted(Path(r.files[0]).parent.name for r in plan.runs) == sorted(p.name for p in subs)
    times = [first_ts_ns(Path(r.files[0])) for r in plan.runs]
    assert times == sorted(times)
    tr = load(tmp_path / "gpu", NOCACHE)
    assert len(tr.ranks) == 1 and tr.runs["count"] == 16 and tr.runs["selected"] == 16
    assert tr.ranks[0].files == plan.runs[-1].files


def test_two_windows_of_one_process_are_windows(tmp_path):
    copy_run(PAIRS / "two_windows", tmp_path)
    tr = load(tmp_path, NOCACHE)
    assert [(r.rank, r.windows) for r in tr.ranks] == [(0, 2)]
    assert tr.runs["count"] == 1 and tr.runs["runs"][0]["windows_per_rank"] == [2]
    assert tr.runs["summary"] == "run 1 of 1, 1 rank, 2 windows"


@pytest.mark.timeout(600)
def test_cpu_ddp_repeated_windows(cpu_capture_factory):
    folder = cpu_capture_factory(preset="optimized", nproc=2, repeat=2, overrides={"num_workers": 0})
    d = analyze_path(folder, NOCACHE).to_dict()
    assert [r["rank"] for r in d["ranks"]] == [0, 1]
    assert d["runs"]["count"] == 1 and d["runs"]["runs"][0]["windows_per_rank"] == [2, 2]
    assert d["runs"]["summary"] == "run 1 of 1, 2 ranks, 2 windows each"
    one = cpu_capture_factory(preset="optimized", nproc=1, repeat=2, overrides={"num_workers": 0})
    tr = load(one, NOCACHE)
    assert [(r.rank, r.windows) for r in tr.ranks] == [(0, 2)]


@pytest.mark.timeout(600)
def test_two_rank_run_beside_a_single_rank_file(tmp_path, cpu_clean_run, cpu_capture_factory):
    single = cpu_capture_factory(preset="optimized", nproc=1, overrides={"num_workers": 0})
    two = copy_run(cpu_clean_run, tmp_path)
    one = copy_run(single, tmp_path, prefix="single_")
    assert load_trace(one[0])["distributedInfo"]["world_size"] == 1
    assert all(load_trace(f)["distributedInfo"]["world_size"] == 2 for f in two)
    newest_is_single = first_ts_ns(one[0]) > max(first_ts_ns(f) for f in two)
    plan = plan_of(tmp_path)
    assert sorted(names(r.files) for r in plan.runs) == sorted([names(two), names(one)])
    two_rank = next(r for r in plan.runs if len(r.processes) == 2)
    d = analyze_path(tmp_path, NOCACHE, run=two_rank.index).to_dict()
    # Both ranks of the 2-rank run, and no file is called "from another run".
    assert [(r["rank"], r["world_size"]) for r in d["ranks"]] == [(0, 2), (1, 2)]
    assert d["skipped"] == [] and d["missing_ranks"] == []
    assert d["runs"]["selected"] == (1 if newest_is_single else 2)


def test_process_without_ddp_two_windows_and_the_stub(no_ddp_run):
    folder = no_ddp_run
    files = sorted(folder.glob("*.pt.trace.json"))
    assert len(files) == 2
    raws = [load_trace(f) for f in files]
    assert all("distributedInfo" not in r for r in raws)
    d = analyze_path(folder, NOCACHE).to_dict()
    assert len(d["ranks"]) == 1 and d["runs"]["runs"][0]["windows_per_rank"] == [2]
    # The trace's last ProfilerStep is the stub the profiler cut when the loader ran out.
    last = [e for e in raws[-1]["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    stub = max(last, key=lambda e: e["ts"])
    others = [e["dur"] for r in raws for e in r["traceEvents"]
              if str(e.get("name", "")).startswith("ProfilerStep#") and e is not stub and e.get("cat") == "user_annotation"]
    assert stub["dur"] < 0.5 * min(others)
    steps = [s["step"] for s in d["ranks"][0]["steps"]]
    assert int(stub["name"].split("#")[1]) not in steps and len(steps) == 3
    assert not any(f["id"] == "dataloader-stall" and f["severity"] == "critical" for f in d["findings"])


def test_a_stub_is_told_by_what_it_holds_not_only_by_its_length():
    """A kept capture of that loop: its stub (step 7, 39.9 us) holds only the DataLoader fetch that ended the loop.
    On 2 busy cores such a fetch can take a tenth of a short CPU step (69 us of 671 us seen, 90 us below), so a last step under
    half the shortest other one that holds nothing but fetches is a stub too; a short last step that does work is
    kept."""
    from traceinspect.analyze.steps import _drop_edge_stubs, _only_loader_fetch
    from traceinspect.load.reader import load
    folder = ROOT / "fixtures" / "cpu" / "fetch_stub"
    raws = [load_trace(f) for f in sorted(folder.glob("*.json.gz"))]
    ann = [e for r in raws for e in r["traceEvents"]
           if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") == "user_annotation"]
    stub = max(ann, key=lambda e: e["ts"])
    inside = [e["name"] for e in raws[-1]["traceEvents"] if e.get("ph") == "X" and e is not stub
              and stub["ts"] <= e["ts"] and e["ts"] + e.get("dur", 0) <= stub["ts"] + stub["dur"]]
    assert inside == ["enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"]
    d = analyze_path(folder, NOCACHE).to_dict()
    assert [s["step"] for s in d["ranks"][0]["steps"]] == [2, 3, 6]
    rank = load(folder, NOCACHE).ranks[0]
    ev = rank.events
    step_rows = ev[ev["name"].astype(str).str.startswith("ProfilerStep#") & (ev["kind"] == 1)]
    tid = int(step_rows["tid"].mode().iloc[0])
    spans = {int(n.split("#")[1]): (float(t), float(t + u))
             for n, t, u in zip(step_rows["name"].astype(str), step_rows["ts"], step_rows["dur"])}
    assert _only_loader_fetch(ev, tid, *spans[7])
    assert not any(_only_loader_fetch(ev, tid, *spans[k]) for k in (2, 3, 6))
    # The share rule with that content test, on the steps' own lengths scaled as seen on busy cores.
    import pandas as pd
    t = pd.DataFrame({"step": [5, 6, 7], "window": [1, 1, 1], "cpu_start": [0.0, 900.0, 1700.0],
                      "cpu_end": [900.0, 1671.0, 1790.0], "synthetic": False})
    kept, dropped = _drop_edge_stubs(t, lambda a, b: True)
    assert list(kept["step"]) == [5, 6] and list(dropped["step"]) == [7]
    kept, dropped = _drop_edge_stubs(t, lambda a, b: False)
    assert list(kept["step"]) == [5, 6, 7] and dropped is None


def test_a_copied_window_is_skipped_once(tmp_path):
    src = copy_run(PAIRS / "two_windows", tmp_path / "a")
    shutil.copy(src[0], tmp_path / "a" / "copy_of_first.json.gz")
    tr = load(tmp_path / "a", NOCACHE)
    assert [(r.rank, r.windows) for r in tr.ranks] == [(0, 2)]
    assert len(tr.skipped) == 1 and "overlapping" in tr.skipped[0].reason
    assert tr.runs["copies_skipped"] == 1


@pytest.mark.parametrize("name,rank", [
    ("rank3.1796123129167468774.pt.trace.json.gz", 3),  # our capture
    ("worker0.pt.trace.json.gz", 0),  # the torch 1.8 TensorBoard plugin samples
    ("fit-profile-1-training_step.1796123129167468774.pt.trace.json", 1),  # Lightning: stage-filename-rank-action
    ("fit-2.1796123129167.pt.trace.json", 2),
    ("myhost_4242.1796123129167468774.pt.trace.json", None),  # tensorboard_trace_handler's default: no rank
])
def test_rank_from_file_names(name, rank):
    """Constructed names, as the writers named spell them; the rank is read from the name only when no
    distributedInfo says it."""
    from traceinspect.load.meta import rank_of

    assert rank_of({}, f"/x/{name}") == rank
    assert rank_of({"distributedInfo": {"rank": 5}}, f"/x/{name}") == 5
    assert rank_of({"distributedInfo": {"rank": "NaN"}}, f"/x/{name}") == rank


def test_relaunch_with_the_same_pid_is_another_run():
    """Constructed facts: one pid (as in a container), steps starting over, no time overlap -> two runs; the same
    pid with later steps -> one process with two windows."""
    from traceinspect.load.peek import FileFacts
    from traceinspect.load.runs import plan_runs

    def f(path, start, step):
        return FileFacts(path=path, rank=0, world_size=1, pid=7, first_step=step, start_ns=start, end_ns=start + 10**9)

    plan = plan_runs([f("a", 0, 2), f("b", 5 * 10**9, 7), f("c", 10**11, 2)])
    assert [[len(p.windows) for p in r.processes] for r in plan.runs] == [[2], [1]]
    # Two single-rank jobs at the same time (two pids, both rank 0): two runs, never one of two ranks 0.
    both = plan_runs([FileFacts(path="x", rank=0, pid=1, start_ns=0, end_ns=10**9),
                      FileFacts(path="y", rank=0, pid=2, start_ns=10**8, end_ns=10**9)])
    assert len(both.runs) == 2


@pytest.mark.timeout(600)
def test_two_ddp_runs_in_one_folder(tmp_path, cpu_clean_run, cpu_capture_factory):
    """Two 2-rank launches into one folder (the second with two windows a rank), as tensorboard_trace_handler
    leaves them: two runs, each with its own two ranks and windows."""
    repeated = cpu_capture_factory(preset="optimized", nproc=2, repeat=2, overrides={"num_workers": 0})
    one = copy_run(cpu_clean_run, tmp_path, prefix="a_")
    two = copy_run(repeated, tmp_path, prefix="b_")
    plan = plan_of(tmp_path)
    got = sorted((names(r.files), [len(p.windows) for p in r.processes]) for r in plan.runs)
    assert got == sorted([(names(one), [1, 1]), (names(two), [2, 2])])
    for r in plan.runs:
        assert [p.rank for p in r.processes] == [0, 1]
    d = analyze_path(tmp_path, NOCACHE).to_dict()
    assert d["runs"]["count"] == 2 and d["skipped"] == [] and len(d["ranks"]) == 2
