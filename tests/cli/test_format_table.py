"""The output formats are one table (``render/formats.py``): a format added to it is offered by ``report`` and
``render`` as an option and written, with nothing else changed; taken out again, it is gone. The tiny format here
(the finding ids, one a line) is registered by the test itself, on a real fixture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from traceinspect.cli.main import main
from traceinspect.render import formats
from traceinspect.report.doc import ReportDoc

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "fixtures" / "gpu" / "baseline"  # one real rank


def finding_ids(doc: ReportDoc) -> str:
    return "".join(f"{f.id}\n" for f in doc.findings)


def finding_folder(doc: ReportDoc, folder: Path, write) -> str:
    write(folder / "ids.txt", finding_ids(doc).encode())
    return f"ids written to {folder}"


IDS = formats.Format("finding-ids", finding_ids, "Write the finding ids to PATH, one a line.")
IDS_DIR = formats.Format("ids-dir", finding_folder, "Write ids.txt into DIR.", target="folder", commands=("render",))


def offered(command: str, capsys) -> str:
    assert main([command, "--help"]) == 0
    return capsys.readouterr().out


def test_a_format_added_to_the_table_is_offered_and_written(tmp_path, monkeypatch, capsys):
    cache = ["--cache-dir", str(tmp_path / "cache")]
    saved = tmp_path / "report.json"
    assert main(["report", str(SMALL), "--json", str(saved), "-q", *cache]) == 0
    expected = "".join(f"{f['id']}\n" for f in json.loads(saved.read_text())["findings"])
    assert expected  # the fixture has findings: the output below is not trivially empty
    assert "--finding-ids" not in offered("report", capsys)

    with monkeypatch.context() as m:
        m.setattr(formats, "FORMATS", (*formats.FORMATS, IDS, IDS_DIR))
        assert "--finding-ids PATH" in offered("report", capsys)
        assert "--ids-dir" not in offered("report", capsys)  # offered by `render` only
        assert "--ids-dir DIR" in offered("render", capsys)

        assert main(["report", str(SMALL), "--finding-ids", str(tmp_path / "a.txt"), "-q", *cache]) == 0
        assert (tmp_path / "a.txt").read_text() == expected
        assert main(["render", str(saved), "--finding-ids", str(tmp_path / "b.txt"),
                     "--ids-dir", str(tmp_path / "ids"), "-q"]) == 0
        assert (tmp_path / "b.txt").read_text() == expected
        assert (tmp_path / "ids" / "ids.txt").read_text() == expected
        assert "ids written to" in capsys.readouterr().err
        # on stdout, as every file format: the text report is then not printed
        assert main(["render", str(saved), "--finding-ids", "-"]) == 0
        assert capsys.readouterr().out == expected
        # two formats on stdout at once: one line, exit 2
        assert main(["render", str(saved), "--finding-ids", "-", "--markdown", "-"]) == 2
        assert "both write to stdout" in capsys.readouterr().err

    assert "--finding-ids" not in offered("report", capsys)
    assert main(["render", str(saved), "--finding-ids", str(tmp_path / "c.txt"), "-q"]) == 2
    assert not (tmp_path / "c.txt").exists()


@pytest.mark.parametrize("command", ["report", "render"])
def test_every_table_format_is_an_option_of_its_commands(command, capsys):
    text = offered(command, capsys)
    for f in formats.formats_for(command):
        assert f"--{f.name}" in text
    for f in formats.FORMATS:
        if command not in f.commands:
            assert f"--{f.name} " not in text
