"""The sides of ``traceinspect diff``: one or several captures each (``A1 A2 -- B1 B2``, or a folder of runs), each
read as a report dict, with its kernels and CPU ops by name where it was read from traces."""

from __future__ import annotations

import dataclasses

import click

from ..errors import UsageError

# What ``--`` between the captures of the two sides becomes before click parses the arguments (click drops a
# plain ``--``); no path is spelt like this.
SPLIT = "\x00--"


class SplitCommand(click.Command):
    """A click command whose first ``--`` separates the base captures from the new ones."""

    def parse_args(self, ctx, args):
        if "--" in args:
            i = args.index("--")
            args = [*args[:i], SPLIT, *args[i + 1:]]
        return super().parse_args(ctx, args)


def split_sides(paths: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """``BASE NEW`` or ``BASE... -- NEW...`` -> (base paths, new paths)."""
    paths = list(paths)
    if SPLIT in paths:
        i = paths.index(SPLIT)
        base, new = paths[:i], [p for p in paths[i + 1:] if p != SPLIT]
        if not base or not new:
            raise UsageError("diff: give at least one capture on each side of '--' (BASE... -- NEW...)")
        return base, new
    if len(paths) != 2:
        raise UsageError(f"diff: expected BASE NEW, or BASE... -- NEW... for several captures a side "
                         f"(got {len(paths)} path(s))")
    return [paths[0]], [paths[1]]


def _run_count(path: str, config) -> int:
    """How many runs a folder of traces holds (docs/folders.md); 1 for a file or on any doubt."""
    from pathlib import Path

    if not Path(path).is_dir():
        return 1
    try:
        from ..load.discover import list_traces
        from ..load.reader import plan
        from ..run.services import workers

        runs = plan(list_traces(path), workers(config.options), config.limits).runs
    except Exception:  # noqa: BLE001 - the report itself says what is wrong with the folder
        return 1
    return int(runs["count"]) if runs and runs.get("count") else 1


def inventory(folder_report) -> dict | None:
    """Rank id -> its kernels and CPU ops by name, and its kernels by name and shape where the files record
    shapes (``kernel_shapes``; None where they could not be read)."""
    try:
        from ..analyze.inventory import report_inventory
        from ..report.diff_shapes import by_shape
        from .diff_shapes import report_shapes

        inv = report_inventory(folder_report.analysis)
        shapes = report_shapes(folder_report) or {}
        for rank, one in inv.items():
            s = shapes.get(rank)
            one["kernel_shapes"] = by_shape(one["kernels"], s) if s is not None else None
        return inv
    except Exception:  # noqa: BLE001 - the names are an extra; the diff stands without them
        return None


def load_sides(paths: list[str], config, load_side) -> tuple[list[dict], list[dict | None]]:
    """Report dicts and inventories of every capture of one side: a saved report.json is one capture (no
    inventory); a folder holding several runs is one capture per run. ``load_side(path, config)``: a report dict,
    or a folder report (a missing path is its error)."""
    reports: list[dict] = []
    inventories: list[dict | None] = []
    for path in paths:
        count = _run_count(path, config)
        for n in range(1, count + 1):
            cfg = dataclasses.replace(config, run=n) if count > 1 else config
            one = load_side(path, cfg)
            if isinstance(one, dict):
                reports.append(one)
                inventories.append(None)
            else:
                reports.append(one.to_dict())
                inventories.append(inventory(one))
    return reports, inventories
