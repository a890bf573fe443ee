"""The H200 twins (fixtures/gpu_twins, scripts/gpu_twins.py): a CUDA-graph replay beside its eager twin, a training
step eager / compiled / compiled with CUDA graphs, FSDP2 at world size 1. The setup record against counts from the
raw JSON, fixes that fit the setup, launch-bound where the GPU waited for launches and claiming what CUDA graphs of
the model remove, and the paired rows: each fix's measured saving against the claim (docs/findings.md, "The twins";
tests/diagnose/twins.py measures).
"""

from __future__ import annotations

import re
from functools import lru_cache

import pytest

from traceinspect.config import DEFAULT
from traceinspect.render.html import render_html
from traceinspect.render.markdown import render_markdown
from traceinspect.render.text import render_text

import twins
from fix_checks import contradictions
from reference import capturable_intervals, issuing_tids, launch_wait_us, launch_wait_within_us, union_us
from twins import PARTIAL, ROWS, TWINS_DIR, count, launch_wait, measured
from analyses import doc_of

NAMES = ("graph_eager", "graph_replay", "train_eager", "train_compiled", "train_graphs", "fsdp2_1gpu")
COMPILED = {"train_compiled", "train_graphs"}
GRAPHS = {"graph_replay", "train_graphs"}
TRAINING = {"train_eager", "train_compiled", "train_graphs", "fsdp2_1gpu"}


@lru_cache(maxsize=None)
def report(name: str) -> dict:
    return doc_of(TWINS_DIR / name)


def setup(name: str) -> dict:
    (r,) = report(name)["ranks"]
    return r["setup"]


def finding(name: str, fid: str) -> dict | None:
    return next((f for f in report(name)["findings"] if f["id"] == fid), None)


def claim(name: str, fid: str) -> float:
    f = finding(name, fid)
    return (f["time_at_stake_us"] or 0.0) if f else 0.0


# -- the setup record against the raw events ---------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_setup_records_compile_and_graph_replays(name):
    s = setup(name)
    triton = count(name, "kernel", lambda n: n.startswith("triton_"))
    graph_calls = count(name, "cuda_runtime", lambda n: n == "cudaGraphLaunch")
    assert s["compile"]["compiled"] is (name in COMPILED)
    assert s["compile"]["triton_kernels"] == triton
    assert (triton > 0) is (name in COMPILED)
    assert s["graph_launches"] == graph_calls
    assert (graph_calls > 0) is (name in GRAPHS)
    # The compile mode where the trace shows it: graph replays inside the compiled regions are torch.compile's CUDA
    # graphs; a compiled run without them could be "default" or "max-autotune-no-cudagraphs", which no event tells.
    assert s["compile"]["mode"] == ("reduce-overhead" if name == "train_graphs" else None)


@pytest.mark.parametrize("name", NAMES)
def test_setup_records_the_optimizer(name):
    opt = setup(name)["optimizer"]
    steps = count(name, "user_annotation", lambda n: n == "Optimizer.step#AdamW.step")
    assert opt["present"] is (name in TRAINING) and opt["steps"] == steps
    if name in TRAINING:
        fused = count(name, "cpu_op", lambda n: n.startswith("aten::_fused_"))
        foreach = count(name, "cpu_op", lambda n: n.startswith("aten::_foreach_") and n != "aten::_foreach_zero_")
        assert (opt["name"], opt["fused"], opt["foreach"]) == ("AdamW", fused > 0, foreach > 0 and not fused)
        assert (opt["fused"], opt["foreach"]) == (False, True)  # the capture script's AdamW(foreach=True)


@pytest.mark.parametrize("name", NAMES)
def test_no_fix_contradicts_the_setup(name):
    s = setup(name)
    for f in report(name)["findings"]:
        code = "\n".join(line.split("#", 1)[0] for line in f["fix"].splitlines())
        assert not contradictions(f["fix"], s), (f["id"], f["fix"])
        assert not re.search(r"DistributedDataParallel|bucket_cap_mb|no_sync", f["fix"]), (f["id"], f["fix"])
        if name in COMPILED:  # a compiled run is not told to compile (only to add CUDA graphs where it has none)
            assert not re.search(r"torch\.compile\((model|m)\)", code), (f["id"], f["fix"])
        if name in GRAPHS:
            assert not re.search(r"reduce-overhead|torch\.cuda\.graph|CUDAGraph", code), (f["id"], f["fix"])
        if "torch.optim." in code:  # the run's own class, fused only where it is not fused yet
            assert name in TRAINING and "torch.optim.AdamW(" in code and not s["optimizer"]["fused"], f["fix"]
    lb = finding(name, "launch-bound")
    if name in ("graph_eager", "train_eager", "train_compiled"):  # the fix the claim is for: CUDA graphs
        assert 'mode="reduce-overhead"' in lb["fix"]
    if name in GRAPHS and lb:
        assert "host work between replays" in lb["fix"]


# -- launch-bound: only where the GPU waited for launches --------------------------------------------------------

def test_launch_bound_is_silent_on_graph_replay_and_fires_on_its_eager_twin():
    share = DEFAULT.launch_bound_idle_share
    replay, eager = launch_wait("graph_replay"), launch_wait("graph_eager")
    # Independently: in the replay the GPU waits for a launch 10-12 % of each step, in its eager twin ~80 %.
    assert all(wait < share * wall for wall, _idle, wait in replay)
    assert all(wait > 2 * share * wall for wall, _idle, wait in eager)
    assert finding("graph_replay", "launch-bound") is None
    f = finding("graph_eager", "launch-bound")
    assert f is not None and f["severity"] == "critical"


@pytest.mark.slow  # the claims against what the graph twins measured
@pytest.mark.parametrize("name", [n for n in NAMES if n != "graph_replay"])
def test_launch_bound_claims_the_launch_wait_inside_what_a_graph_of_the_model_removes(name):
    """The claim is the GPU's launch wait while the CPU ran work a CUDA graph of the model takes off it, computed
    here from the raw events (tests/reference.py: the issuing threads' events, kept work first, compiled code
    launching one by one, the compiled wrappers, the rest; the Python between two capturable events): not the
    wait while the optimizer, AccumulateGrad, loss.item() or the Python between the regions ran."""
    steps = report(name)["ranks"][0]["steps"]
    ev, tids = list(twins.events(name)), issuing_tids(twins.events(name))
    cpu = {int(s["name"].split("#")[1]): (s["ts"], s["ts"] + s["dur"]) for s in twins.steps(name)}
    inside, total = [], []
    for s in steps:
        iv = capturable_intervals(ev, cpu[s["step"]], tids)
        assert s["cpu_capturable_us"] == pytest.approx(union_us(iv), abs=1.0), (name, s["step"])
        wait = launch_wait_within_us(ev, (s["start_us"], s["end_us"]), cpu[s["step"]], iv)
        assert s["idle_launch_capturable_us"] == pytest.approx(wait, rel=0.05, abs=20.0), (name, s["step"])
        inside.append(wait)
        total.append(launch_wait_us(ev, (s["start_us"], s["end_us"]), cpu[s["step"]]))
    c = claim(name, "launch-bound")
    assert c == pytest.approx(sum(inside) / len(inside), rel=0.05)
    if name.startswith("train"):  # a training step keeps its optimizer, AccumulateGrad and loss.item() on the CPU
        assert c < 0.85 * sum(total) / len(total)


def test_what_a_graph_leaves_on_the_cpu_is_explained_not_claimed():
    """The rest of the launch wait (the GPU idle while the eager optimizer and the rest ran) is launch-bound's
    evidence, claimed by no finding: gpu-idle, the symptom, does not claim it either."""
    f = finding("train_eager", "launch-bound")
    e = f["evidence"]["per_rank"][0]
    assert e["kept_idle_us_per_step"] == pytest.approx(e["idle_launch_us_per_step"]
                                                       - e["idle_launch_capturable_us_per_step"])
    assert e["kept_idle_us_per_step"] > 1000.0  # the eager AdamW alone runs 1.1 ms a step
    assert claim("train_eager", "gpu-idle") < 10.0
    assert "upper bound" in f["evidence"]["claim_note"]
    assert finding("train_graphs", "launch-bound")["evidence"]["claim_note"] is None  # it replays graphs


# -- FSDP2 at world size 1 ---------------------------------------------------------------------------------------

def test_fsdp2_at_world_size_1_is_named_and_says_no_collective_was_recorded():
    d = report("fsdp2_1gpu")
    assert d["strategy"]["kinds"] == ["fsdp2"] and d["strategy"]["parallelism"] == "FSDP2"
    s = setup("fsdp2_1gpu")
    assert (s["parallelism"], s["world_size"], s["backend"]) == ("fsdp2", 1, "nccl")
    # Independently: FSDP2's annotations are there; no collective of any kind, on the CPU or the GPU.
    assert count("fsdp2_1gpu", "user_annotation", lambda n: n.startswith("FSDP::")) > 0
    comm = re.compile(r"nccl|gloo|c10d|record_param_comms|all_gather|allgather|reduce_scatter|all_reduce|allreduce",
                      re.I)
    assert not any(comm.search(str(e.get("name", ""))) for e in twins.events("fsdp2_1gpu")
                   if not str(e.get("name", "")).startswith("FSDP::"))
    assert all(st["comm_calls"] == 0 for st in d["ranks"][0]["steps"])
    note = d["strategy"]["communication"]
    assert note.startswith("no collective recorded") and "world size 1" in note
    assert "Communication: no collective recorded" in render_text(d, width=1000)
    assert "Communication: no collective recorded" in render_markdown(d)
    assert "Communication: no collective recorded" in render_html(d)
    for f in d["findings"]:  # no DDP or communication advice
        assert f["id"] not in {"small-buckets", "exposed-comm", "sync-every-microstep"}, f["id"]


@pytest.mark.parametrize("name", ["train_eager", "graph_replay"])
def test_runs_without_parallelism_carry_no_communication_note(name):
    assert "communication" not in report(name)["strategy"]


# -- the paired rows ---------------------------------------------------------------------------------------------

# The claim on the problem run alone (what its report promises a user who has only that trace) against the saving
# the fix it prescribes measured: CUDA graphs of the forward and backward (torch.compile(mode="reduce-overhead")).
# A twin that applies less than that fix (twins.PARTIAL) bounds the claim from below only.
NOT_YET: dict[tuple[str, str], str] = {}


def _row(p):
    problem, twin, fid = p
    reason = NOT_YET.get((problem, twin))
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(problem, twin, fid, id=f"{problem}->{twin}", marks=marks)


@pytest.mark.parametrize("problem,twin,fid", [_row(p) for p in ROWS if p[:2] not in PARTIAL])
def test_claim_on_the_problem_run_predicts_the_fix(problem, twin, fid):
    m = measured(problem, twin)
    c = claim(problem, fid)
    assert m["saving_us"] > m["noise_us"]  # every fix here measurably saves
    assert abs(c - m["saving_us"]) <= m["tolerance_us"], (
        f"{problem} -> {twin}: claimed {c / 1000:.2f} ms, measured {m['saving_us'] / 1000:.2f} ms "
        f"(tolerance {m['tolerance_us'] / 1000:.2f} ms)")


@pytest.mark.parametrize("problem,twin,fid", [p for p in ROWS if p[:2] in PARTIAL],
                         ids=[f"{p}->{t}" for p, t, _ in ROWS if (p, t) in PARTIAL])
def test_a_partial_fix_saves_at_most_the_claim(problem, twin, fid):
    """torch.compile in its default mode is not the fix the report prescribes (twins.PARTIAL says why it saves
    less): the claim must still cover what it saves, and the report must prescribe the whole fix."""
    m = measured(problem, twin)
    assert m["saving_us"] > m["noise_us"]
    assert m["saving_us"] <= claim(problem, fid) + m["tolerance_us"]
    assert 'mode="reduce-overhead"' in finding(problem, fid)["fix"]


@pytest.mark.parametrize("problem,twin,fid", ROWS, ids=[f"{p}->{t}" for p, t, _ in ROWS])
def test_claim_less_what_the_twin_still_claims_matches_the_saving(problem, twin, fid):
    """test_pairs' prediction: the claim on the problem run less the claim on the twin (what the twin still runs
    eagerly that its graphs could take: the loss, a compiled run's per-kernel code). A check of the accounting's
    consistency; what the problem's report promises is the claim alone, above."""
    m = measured(problem, twin)
    pred = max(claim(problem, fid) - claim(twin, fid), 0.0)
    assert abs(pred - m["saving_us"]) <= m["tolerance_us"], (problem, twin, pred, m)


if __name__ == "__main__":  # print the twins' rows of the paired table in docs/findings.md
    rows = {}
    for problem, twin, fid in ROWS:
        f = finding(problem, fid)
        rows[(problem, twin)] = (claim(problem, fid), max(claim(problem, fid) - claim(twin, fid), 0.0),
                                 f["severity"] if f else "none")
    print(twins.table(rows))
