"""``report --all-runs``: the report command once per run of the folder, each output name marked with its run."""

from __future__ import annotations

import click

from . import formats
from .options import workers_for


def report_all_runs(ctx: click.Context, command) -> None:
    from ..config import RunOptions
    from ..load.discover import list_traces
    from ..load.reader import plan
    from ..run.services import workers

    params = dict(ctx.params)
    params["workers"] = workers_for(params["workers"])  # capped (and said) once, not once per run
    formats.no_stdout_per_run(command.name, params)
    runs = plan(list_traces(params["path"]), workers(RunOptions(workers=params["workers"]))).runs  # reads no events
    formats.make_folders_per_run(command.name, params)  # the runs' folders go inside --out DIR: made here
    count = runs["count"] if runs else 1
    worst = 0
    for n in range(1, count + 1):
        one = {**params, "all_runs": False, "run_no": n, **formats.per_run(command.name, params, n)}
        if n > 1 and not params.get("quiet"):
            click.echo()
        try:
            ctx.invoke(command, **one)
        except SystemExit as exc:  # --fail-on met in this run: go on with the others, exit with it at the end
            worst = max(worst, int(exc.code or 0))
    if worst:
        raise SystemExit(worst)
