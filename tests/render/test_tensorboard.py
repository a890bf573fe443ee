"""TensorBoard summaries, read back with TensorBoard's own reader (EventAccumulator): the scalars are the report's
numbers, the text is the verdict and the rank's findings."""

from __future__ import annotations

import re
import shutil
import sys

import pytest

from traceinspect.cli.main import main
from traceinspect.errors import UsageError
from traceinspect.render.tensorboard import MISSING, write_tensorboard
from traceinspect.render.safe import markdown
from traceinspect.render.text import verdict
from traceinspect.report.doc import from_dict

from public_traces import DIFF_CONTROL, DDP_2RANK, need, only_file
from analyzed_runs import analyzed, real_cpu_run, synthetic_cpu_run

tb = pytest.importorskip("tensorboard", reason="pip install 'traceinspect[tensorboard]'")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.util import tensor_util  # noqa: E402


def read_run(path) -> EventAccumulator:
    ea = EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    return ea


def text_of(ea: EventAccumulator, tag: str) -> tuple[int, str]:
    (ev,) = ea.Tensors(tag)
    return ev.step, tensor_util.make_ndarray(ev.tensor_proto).item().decode("utf-8")


def check_rank_run(ea: EventAccumulator, d: dict, r: dict) -> None:
    steps = [s["step"] for s in r["steps"]]
    scalars = set(ea.Tags()["scalars"])
    assert {f"breakdown_ms/{k}" for k in r["steps"][0]["breakdown_us"]} <= scalars
    for tag, get, scale in (
        ("step/wall_ms", lambda s: s["wall_us"], 1e3),
        ("cpu/dataloader_ms", lambda s: s["dataloader_us"], 1e3),
        *([("copies_mb/h2d", lambda s: s["h2d_bytes"], 1e6)] if r["basis"] == "gpu" else []),
        *[(f"breakdown_ms/{k}", (lambda s, k=k: s["breakdown_us"][k]), 1e3) for k in r["steps"][0]["breakdown_us"]],
    ):
        got = ea.Scalars(tag)
        assert [e.step for e in got] == steps, tag
        for e, s in zip(got, r["steps"]):
            assert e.value == pytest.approx(get(s) / scale, rel=1e-6, abs=1e-6), (tag, s["step"])  # float32 in TB
    if r["basis"] == "cpu":  # a CPU-only run has no copies: no zero copy scalars
        assert not [t for t in scalars if t.startswith("copies_mb/")]
    step, text = text_of(ea, "traceinspect/verdict")
    assert text == markdown(verdict(from_dict(d))) and step == max(steps)
    _, text = text_of(ea, "traceinspect/findings")
    mine = [f for f in d["findings"] if r["rank"] in f["ranks"]]
    for f in mine:
        assert f"[{f['severity']}] {f['id']}" in text
        assert f["fix"].splitlines()[0] in text
    if not mine:
        assert "No problems found" in text


def test_gpu_report_reads_back(tmp_path):
    need(DIFF_CONTROL)
    _, _, d = analyzed(DIFF_CONTROL)
    root = write_tensorboard(d, tmp_path)
    assert root == str(tmp_path / "traceinspect")
    (r,) = d["ranks"]
    ea = read_run(tmp_path / "traceinspect" / f"rank{r['rank']}")
    check_rank_run(ea, d, r)
    busy = ea.Scalars("step/gpu_busy_ms")
    assert [e.value for e in busy] == pytest.approx([s["gpu_busy_us"] / 1e3 for s in r["steps"]], rel=1e-6)


def test_cpu_ranks_and_rewrite(tmp_path):
    d = analyzed(synthetic_cpu_run(tmp_path / "syn", ranks=(0, 2), world_size=3))[2]
    for _ in range(2):  # writing again replaces our event files instead of adding a second copy
        write_tensorboard(d, tmp_path / "logs")
    runs = sorted(p.name for p in (tmp_path / "logs" / "traceinspect").iterdir())
    assert runs == ["rank0", "rank2"]
    for r in d["ranks"]:
        run = tmp_path / "logs" / "traceinspect" / f"rank{r['rank']}"
        assert len(list(run.glob("events.out.tfevents.*"))) == 1
        ea = read_run(run)
        check_rank_run(ea, d, r)
        assert "step/gpu_busy_ms" not in ea.Tags()["scalars"]  # CPU-only rank


@pytest.mark.capture
def test_real_cpu_capture(request, tmp_path):
    folder = real_cpu_run(request, "cpu_baseline_run")
    d = analyzed(folder)[2]
    write_tensorboard(d, tmp_path)
    for r in d["ranks"]:
        check_rank_run(read_run(tmp_path / "traceinspect" / f"rank{r['rank']}"), d, r)


def test_cli_tensorboard_beside_the_traces(tmp_path, capsys):
    need(DDP_2RANK)
    shutil.copy(only_file(DDP_2RANK), tmp_path / "rank-0.json.gz")
    assert main(["report", str(tmp_path), "--tensorboard", "-q", "--no-cache", "--workers", "1"]) == 0
    assert str(tmp_path / "traceinspect") in capsys.readouterr().err
    ea = read_run(tmp_path / "traceinspect" / "rank0")
    assert len(ea.Scalars("step/wall_ms")) == 3
    # a trace file as the path: the summaries go into its folder
    d = analyzed(DDP_2RANK)[2]
    assert write_tensorboard(d, tmp_path / "rank-0.json.gz") == str(tmp_path / "traceinspect")


def test_unwritable_folder_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    d = analyzed(synthetic_cpu_run(tmp_path / "syn"))[2]
    with pytest.raises(UsageError, match="cannot write TensorBoard summaries"):
        write_tensorboard(d, blocker / "sub")


def test_missing_tensorboard_is_one_line(tmp_path, monkeypatch):
    for name in [m for m in sys.modules if m == "tensorboard" or m.startswith("tensorboard.")]:
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed: every import of it fails
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    d = analyzed(synthetic_cpu_run(tmp_path / "syn"))[2]
    with pytest.raises(UsageError) as exc:
        write_tensorboard(d, tmp_path)
    assert str(exc.value) == MISSING and "pip install 'traceinspect[tensorboard]'" in MISSING


def test_findings_markdown_renders_in_the_text_tab(tmp_path):
    """A list needs a blank line before it in Markdown, or the Text tab shows one paragraph with literal asterisks;
    values are written by the formatter (no 1.76e+05, no raw dicts)."""
    need(DIFF_CONTROL)
    d = analyzed(DIFF_CONTROL)[2]
    root = write_tensorboard(d, tmp_path)
    _, text = text_of(read_run(tmp_path / "traceinspect" / f"rank{d['ranks'][0]['rank']}"), "traceinspect/findings")
    lines = text.splitlines()
    bullets = [i for i, line in enumerate(lines) if line.startswith("* ")]
    assert bullets and root == str(tmp_path / "traceinspect")
    for i in bullets:
        assert lines[i - 1] == "" or lines[i - 1].startswith("* "), lines[i - 1]
    assert not re.search(r"\d\.\d+e[+-]\d+", text) and "{'" not in text and '{"' not in text


def test_cli_tensorboard_into_a_chosen_folder(tmp_path, capsys):
    need(DDP_2RANK)
    shutil.copy(only_file(DDP_2RANK), tmp_path / "rank-0.json.gz")
    logs = tmp_path / "logs"
    assert main(["report", str(tmp_path), "--tensorboard", str(logs), "-q", "--no-cache", "--workers", "1"]) == 0
    assert str(logs / "traceinspect") in capsys.readouterr().err
    assert len(read_run(logs / "traceinspect" / "rank0").Scalars("step/wall_ms")) == 3
    assert not (tmp_path / "traceinspect").exists()  # nothing written beside the traces
