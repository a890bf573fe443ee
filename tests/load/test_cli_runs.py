"""``report --run N`` and ``--all-runs`` on two real captures of one job in one folder."""

from __future__ import annotations

import json

import pytest

from traceinspect.cli.main import main

from load_helpers import PAIRS, copy_run


@pytest.mark.slow
def test_run_and_all_runs(tmp_path, capsys):
    folder = tmp_path / "log"
    a = copy_run(PAIRS / "small_clean", folder)
    b = copy_run(PAIRS / "small_clean_b", folder)
    out = tmp_path / "out"
    out.mkdir()  # an output folder that does not exist is an error, never made silently
    assert main(["report", str(folder), "--no-cache", "--all-runs", "--json", str(out / "r.json"), "--width", "120"]) == 0
    text = capsys.readouterr().out
    assert "run 1 of 2" in text and "run 2 of 2" in text
    docs = {n: json.loads((out / f"r.run{n}.json").read_text()) for n in (1, 2)}
    assert {n: d["runs"]["selected"] for n, d in docs.items()} == {1: 1, 2: 2}
    files = {n: [p.rsplit("/", 1)[-1] for p in d["ranks"][0]["files"]] for n, d in docs.items()}
    assert sorted(files.values()) == sorted([[a[0].name], [b[0].name]])
    assert main(["report", str(folder), "--no-cache", "--run", "1", "--json", str(out / "one.json"), "-q"]) == 0
    assert json.loads((out / "one.json").read_text())["ranks"][0]["files"] == docs[1]["ranks"][0]["files"]
    capsys.readouterr()
    assert main(["report", str(folder), "--no-cache", "--run", "3", "-q"]) == 2
    err = capsys.readouterr().err
    assert "--run 3" in err and err.strip().count("\n") == 0
    assert not list(folder.glob(".traceinspect-cache"))  # --no-cache writes nothing beside the traces
