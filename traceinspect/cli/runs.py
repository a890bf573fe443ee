"""``report --all-runs``: the report command once per run of the folder, each output name marked with its run."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import UsageError
from .options import workers_for
from .output import STDOUT, check_targets, make_out_dir


def _nth(path: str | None, n: int) -> str | None:
    """report.json -> report.run2.json; a folder (--out) gets a run2/ sub-folder."""
    if not path:
        return path
    p = Path(path)
    suffix = "".join(p.suffixes[-1:])
    return str(p.with_name(f"{p.name[: len(p.name) - len(suffix)]}.run{n}{suffix}"))


def report_all_runs(ctx: click.Context, command) -> None:
    from ..config import Config
    from ..run.local import plan

    params = dict(ctx.params)
    params["workers"] = workers_for(params["workers"])  # capped (and said) once, not once per run
    for key, flag in (("json_path", "--json"), ("md_path", "--markdown"), ("html_path", "--html")):
        if params.get(key) == STDOUT:
            raise UsageError(f"--all-runs writes one report per run: give {flag} a file name, not '-'")
    _, _, runs = plan(params["path"], Config(workers=params["workers"], use_cache=False))  # lists files, reads no events
    count = runs["count"] if runs else 1
    if params.get("out_dir"):  # the runs' folders go inside it: made here, as `--out DIR` alone makes DIR
        check_targets(out_dir=params["out_dir"])
        make_out_dir(params["out_dir"])
    worst = 0
    for n in range(1, count + 1):
        one = {**params, "all_runs": False, "run_no": n,
               "json_path": _nth(params.get("json_path"), n), "md_path": _nth(params.get("md_path"), n),
               "html_path": _nth(params.get("html_path"), n),
               "out_dir": str(Path(params["out_dir"]) / f"run{n}") if params.get("out_dir") else None}
        if n > 1 and not params.get("quiet"):
            click.echo()
        try:
            ctx.invoke(command, **one)
        except SystemExit as exc:  # --fail-on met in this run: go on with the others, exit with it at the end
            worst = max(worst, int(exc.code or 0))
    if worst:
        raise SystemExit(worst)
