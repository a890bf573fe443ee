"""Files -> runs -> ranks -> windows, decided from what each file says (``peek.FileFacts``).

The order of evidence (docs/folders.md has examples):

1. A *process* is one (host, pid, rank): its files are its successive profiling windows, in time order. Windows of
   one process never overlap in time; a file that overlaps another of its process is a copy and is skipped. A
   window whose first ``ProfilerStep`` number is not above the previous window's starts a new process (a
   relaunch that got the same pid, common in containers), as does another job identity (backend, world size,
   NCCL version from ``distributedInfo``).
2. A *run* is the processes that ran at the same time: their time spans (``baseTimeNanoseconds`` + ``ts``)
   overlap. Runs of one job launched one after the other never overlap. Processes that overlap but cannot be one
   job (the same rank twice, different world sizes or job identities) are separate runs.
3. Runs are numbered 1..N from the oldest; a report is about one run (the most recent unless asked otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

from .peek import FileFacts
from .trace import Skipped

# Ranks of one run start their windows together, but their clocks may differ a little (several hosts).
SLACK_NS = 100_000_000


@dataclass
class Process:
    """One rank of one run: its windows (files) in time order."""

    rank: int | None
    pid: int | None
    host: str | None
    windows: list[FileFacts] = field(default_factory=list)

    @property
    def start_ns(self) -> float:
        return min(w.sort_time for w in self.windows)

    @property
    def end_ns(self) -> float:
        return max(float(w.end_ns) if w.end_ns is not None else w.sort_time for w in self.windows)

    @property
    def job(self) -> tuple:
        return self.windows[0].job

    @property
    def files(self) -> list[str]:
        return [w.path for w in self.windows]


@dataclass
class Run:
    processes: list[Process] = field(default_factory=list)
    index: int = 0  # 1-based, oldest first

    @property
    def start_ns(self) -> float:
        return min(p.start_ns for p in self.processes)

    @property
    def end_ns(self) -> float:
        return max(p.end_ns for p in self.processes)

    @property
    def files(self) -> list[str]:
        return [f for p in self.processes for f in p.files]

    @property
    def world_size(self) -> int | None:
        ws = [w.world_size for p in self.processes for w in p.windows if w.world_size]
        return max(ws) if ws else None

    def takes(self, p: Process) -> bool:
        """Whether ``p`` can be another rank of this run."""
        if any(q.job != p.job for q in self.processes):
            return False
        return p.rank is None or all(q.rank != p.rank for q in self.processes)


@dataclass
class RunPlan:
    runs: list[Run]
    skipped: list[Skipped]  # copies (a window overlapping another of its own process)

    def select(self, run: int | None) -> Run | None:
        """Run number ``run`` (1-based), or the most recent one."""
        if not self.runs:
            return None
        if run is None:
            return self.runs[-1]
        return self.runs[run - 1] if 1 <= run <= len(self.runs) else None


def plan_runs(facts: list[FileFacts]) -> RunPlan:
    skipped: list[Skipped] = []
    processes = _processes([f for f in facts if f.error is None], skipped)
    runs = _runs(processes)
    runs.sort(key=lambda r: (r.start_ns, r.files[0]))
    for i, r in enumerate(runs, 1):
        r.index = i
        _number_unranked(r)
    return RunPlan(runs=runs, skipped=skipped)


def _processes(facts: list[FileFacts], skipped: list[Skipped]) -> list[Process]:
    by_key: dict[tuple, list[FileFacts]] = {}
    for f in facts:
        key = (f.host or _host_from_worker(f), f.pid, f.rank) if f.pid is not None else ("", f.path, f.rank)
        by_key.setdefault(key, []).append(f)
    out: list[Process] = []
    for (host, pid, rank), files in by_key.items():
        files.sort(key=lambda f: (f.sort_time, f.path))
        cur: Process | None = None
        for f in files:
            if cur is not None:
                prev = cur.windows[-1]
                if _overlaps(prev, f):
                    skipped.append(Skipped(file=f.path, reason=f"rank {rank if rank is not None else '?'} again, "
                                                                f"overlapping {prev.path} in time (a copy, or a "
                                                                "file from another run)"))
                    continue
                if not _continues(prev, f):
                    cur = None
            if cur is None:
                cur = Process(rank=rank, pid=pid if isinstance(pid, int) else None, host=host or None)
                out.append(cur)
            cur.windows.append(f)
    return out


def _host_from_worker(f: FileFacts) -> str:
    """tensorboard_trace_handler's default worker name is ``<host>_<pid>``: the host, when the pid matches."""
    w = f.worker or ""
    head, _, tail = w.rpartition("_")
    return head if head and tail.isdigit() and int(tail) == f.pid else ""


def _overlaps(a: FileFacts, b: FileFacts) -> bool:
    if None in (a.start_ns, a.end_ns, b.start_ns, b.end_ns):
        return False
    return a.start_ns < b.end_ns and b.start_ns < a.end_ns


def _continues(prev: FileFacts, nxt: FileFacts) -> bool:
    """Whether ``nxt`` is a later window of the process that wrote ``prev`` (not a relaunch with the same pid)."""
    if prev.job != nxt.job:
        return False
    if prev.first_step is not None and nxt.first_step is not None and nxt.first_step <= prev.first_step:
        return False
    return True


def _runs(processes: list[Process]) -> list[Run]:
    """Processes that overlap in time are ranks of one run, unless they cannot be."""
    processes = sorted(processes, key=lambda p: (p.start_ns, p.files[0]))
    runs: list[Run] = []
    cluster: list[Run] = []
    cluster_end = float("-inf")
    for p in processes:
        if p.start_ns > cluster_end + SLACK_NS:
            cluster = []
            cluster_end = float("-inf")
        home = next((r for r in cluster if r.takes(p)), None)
        if home is None:
            home = Run()
            cluster.append(home)
            runs.append(home)
        home.processes.append(p)
        cluster_end = max(cluster_end, p.end_ns)
    return runs


def _number_unranked(run: Run) -> None:
    """Processes that name no rank get the free ranks, in time order; then the run is ordered by rank."""
    taken = {p.rank for p in run.processes if p.rank is not None}
    nxt = 0
    for p in sorted((p for p in run.processes if p.rank is None), key=lambda p: (p.start_ns, p.files[0])):
        while nxt in taken:
            nxt += 1
        p.rank = nxt
        taken.add(nxt)
    run.processes.sort(key=lambda p: p.rank)


# ------------------------------------------------------------------------------------------------------------
# What the report says about the runs


def _iso(ns: float | None) -> str | None:
    if ns is None or ns <= 0:
        return None
    try:
        return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return None


def run_dict(r: Run, selected: bool) -> dict:
    d = _run_dict(r, selected)
    notes = [n for p in r.processes for w in p.windows for n in w.notes]  # e.g. an implausible world size
    return {**d, "notes": notes} if notes else d  # the key only where there are notes (reports stay as they were)


def _run_dict(r: Run, selected: bool) -> dict:
    windows = [len(p.windows) for p in r.processes]
    clock = "relative" if any(w.clock == "relative" for p in r.processes for w in p.windows) else "absolute"
    return {
        "run": r.index,
        "selected": selected,
        "folders": sorted({w.folder for p in r.processes for w in p.windows}),
        "files": len(r.files),
        "ranks": [p.rank for p in r.processes],
        "world_size": r.world_size,
        "windows_per_rank": windows,
        "start_ns": int(r.start_ns) if clock == "absolute" else None,
        "end_ns": int(r.end_ns) if clock == "absolute" else None,
        "start": _iso(r.start_ns) if clock == "absolute" else None,
        "clock": clock,
        "processes": [{"rank": p.rank, "pid": p.pid, "host": p.host, "files": p.files} for p in r.processes],
        "other_devices": sorted({d for p in r.processes for w in p.windows for d in w.other_devices}),
    }


def runs_dict(plan: RunPlan, chosen: Run) -> dict:
    """The report's top-level ``runs`` object (documented in docs/folders.md)."""
    others = [r for r in plan.runs if r is not chosen]
    return {
        "count": len(plan.runs),
        "selected": chosen.index,
        "runs": [run_dict(r, r is chosen) for r in plan.runs],
        "other_runs_files": sum(len(r.files) for r in others),
        "copies_skipped": len(plan.skipped),
        "summary": summary_line(plan, chosen),
        # Whether the text report shows the summary: more than one run, windows, copies or unmodelled devices.
        "notable": bool(others or plan.skipped or any(len(p.windows) > 1 for p in chosen.processes)
                        or run_dict(chosen, True)["other_devices"] or run_dict(chosen, True).get("notes")),
    }


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def summary_line(plan: RunPlan, chosen: Run) -> str:
    """"run 2 of 3, 8 ranks, 2 windows each; other runs: 16 files of 2 runs (1 earlier, 1 later)"."""
    n = len(chosen.processes)
    wins = sorted({len(p.windows) for p in chosen.processes})
    if len(wins) == 1:
        w = _plural(wins[0], "window") + (" each" if n > 1 else "")
    else:
        w = f"{wins[0]}-{wins[-1]} windows per rank"
    line = f"run {chosen.index} of {len(plan.runs)}, {_plural(n, 'rank')}, {w}"
    if plan.skipped:
        line += f"; {(str(len(plan.skipped)) + (' copy' if len(plan.skipped) == 1 else ' copies'))} of a window skipped"
    devices = run_dict(chosen, True)["other_devices"]
    if devices:
        line += f"; activity of devices the report does not model: {', '.join(devices)}"
    notes = run_dict(chosen, True).get("notes")
    if notes:
        line += "; " + "; ".join(notes[:2]) + (f" (+{len(notes) - 2} more such notes)" if len(notes) > 2 else "")
    others = [r for r in plan.runs if r is not chosen]
    if others:
        earlier = sum(r.index < chosen.index for r in others)
        later = len(others) - earlier
        when = "earlier" if not later else "later" if not earlier else f"{earlier} earlier, {later} later"
        files = sum(len(r.files) for r in others)
        line += (f"; not in this report: {_plural(files, 'file')} of {_plural(len(others), 'other run')} ({when}); "
                 f"--run N reports run N, --all-runs each")
    return line
