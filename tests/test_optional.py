"""One helper for optional dependencies: a missing one is one line with the install command; the cached
re-report and reading a saved report work without pandas at all."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from traceinspect._optional import MissingDependency, import_optional

from public_traces import DIFF_CONTROL, need, only_file

ROOT = Path(__file__).resolve().parents[1]


def test_missing_module_names_the_install_command(monkeypatch):
    with pytest.raises(MissingDependency, match="testing needs no_such_module_xyz, which is not installed: "
                                                "pip install no_such_module_xyz"):
        import_optional("no_such_module_xyz", "testing")
    # A known optional package names its extra (blocked here: None in sys.modules is "not installed").
    for name in [m for m in sys.modules if m == "tensorboard" or m.startswith("tensorboard.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    with pytest.raises(MissingDependency, match=r"pip install 'traceinspect\[tensorboard\]'"):
        import_optional("tensorboard.summary", "--tensorboard")


def test_an_error_inside_an_installed_module_is_not_called_missing(tmp_path, monkeypatch):
    (tmp_path / "ti_broken_mod.py").write_text("import ti_no_such_inner_module\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as exc:
        import_optional("ti_broken_mod", "testing")
    assert not isinstance(exc.value, MissingDependency) and exc.value.name == "ti_no_such_inner_module"


def _cli_without(blocked: list[str], args: list[str], env_extra: dict) -> subprocess.CompletedProcess:
    code = (f"import sys\nfor m in {blocked!r}: sys.modules[m] = None\n"
            "from traceinspect.cli.main import main\n"
            f"sys.exit(main({args!r}))\n")
    env = {**os.environ, **env_extra, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


def test_without_pandas_a_new_report_fails_in_one_line_and_a_cached_one_works(tmp_path):
    need(DIFF_CONTROL)
    folder = tmp_path / "traces"
    folder.mkdir()
    shutil.copy(only_file(DIFF_CONTROL), folder / "rank3.json.gz")
    env = {"TRACEINSPECT_CACHE_DIR": str(tmp_path / "cache")}
    args = ["report", str(folder), "--json", str(tmp_path / "r.json"), "--width", "120"]
    res = _cli_without(["pandas"], args, env)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip() == "traceinspect: analysing traces needs pandas, which is not installed: pip install pandas"
    full = _cli_without([], args, env)  # fills the cache
    assert full.returncode == 0, full.stderr
    cached = _cli_without(["pandas", "numpy", "pyarrow"], args, env)
    assert cached.returncode == 0, cached.stderr
    assert cached.stdout == full.stdout
    # A saved report.json is read without them too (diff of a report with itself).
    d = _cli_without(["pandas", "numpy", "pyarrow"], ["diff", str(tmp_path / "r.json"), str(tmp_path / "r.json")], env)
    assert d.returncode == 0 and "within noise" in d.stdout, d.stderr


def test_dask_executor_without_dask_is_one_line(tmp_path):
    need(DIFF_CONTROL)
    res = _cli_without(["dask", "distributed"], ["report", str(DIFF_CONTROL), "--executor", "dask", "--no-cache"], {})
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip() == ("traceinspect: --executor dask needs dask, which is not installed: "
                                  "pip install 'traceinspect[dask]'")
