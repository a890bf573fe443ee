#!/usr/bin/env python3
"""Benchmark ``traceinspect report`` against Holistic Trace Analysis (HTA) and a decode floor.

One command (from the repository root)::

    .venv/bin/python benchmarks/run.py       # --sizes 200,1000 --ranks 8x50: ~10 min here
    .venv/bin/python benchmarks/run.py --sizes 200,1000 --ranks 8x200   # + ~7 min
    .venv/bin/python benchmarks/run.py --big --no-hta   # + the 4 GB and 10 GB scaled inputs (bounded memory)

For every input it runs, each in its own process and with its peak memory measured:

* ``floor``   benchmarks/floor.py: read + gunzip + a bare typed msgspec decode on one core;
* ``HTA``     benchmarks/hta_driver.py in benchmarks/.venv-hta: load + temporal breakdown +
              comm/comp overlap + GPU kernel breakdown (HTA's defaults);
* ``ti``      ``traceinspect report DIR --json OUT --no-cache`` (full report, all rules);
* ``ti cold`` the same without ``--no-cache`` on an empty cache (decodes and writes the cache);
* ``ti warm`` the same again (re-report from the cache).

Inputs are scaled copies of a real trace (see scale_trace.py), built once into benchmarks/data/
(git-ignored) and reused while the source, size and scaler version are unchanged. The results
table is printed and written to benchmarks/results.md and benchmarks/results.json.

Why processes and a /proc poller: both tools may fork workers (HTA one per rank up to the core
count, traceinspect one per core), so the peak is the largest *sum* of the RSS of the process tree,
sampled every 50 ms, and never less than the kernel's own high-water mark of the largest process
(``ru_maxrss`` from wait4). Wall time is the whole process, interpreter start included: what a user
waits for. All inputs are in the page cache (just written), so times are CPU, not disk.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_SOURCE = ROOT.parent / "shared/traces/public/hta_diff_control/control.json.gz"
# The memory-heavy source: a real V100 DDP rank captured with profile_memory (28,010 [memory] instant events in
# 216k events, 13 %); its scaled copies carry as large a share of memory events into every size.
MEMORY_SOURCE = ROOT.parent / "shared/traces/public/hta_v100_memory/rank1.json.gz"
HTA_VENV = HERE / ".venv-hta"
HTA_SPEC = "HolisticTraceAnalysis==0.5.0"
BIG_MB = (4000, 10000)  # --big: the scaled inputs whose memory is bounded (Config.memory_limit_bytes), not HTA's
HTA_MAX_MB = 2000.0  # HTA peaked at 4.4-5.1x the JSON (results.json): a 4 GB input needs ~20 GB, past a 24 GiB machine
PAGE = os.sysconf("SC_PAGE_SIZE")
T_START = time.perf_counter()
IDLE_WAIT_BUDGET = [120.0]  # seconds of waiting for a quiet machine left for the whole benchmark


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T_START:6.0f}s] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Measuring one process tree


@dataclass
class Measured:
    cmd: list[str]
    rc: int
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    timed_out: bool
    stdout_path: str
    stderr_path: str
    others_load: float  # cores used on average by processes other than this one's tree
    walls: tuple = ()  # every run's wall time where the command was run several times (``repeated``)


    def last_json(self) -> dict | None:
        """The last stdout line that is a JSON object (the drivers' result line)."""
        try:
            lines = Path(self.stdout_path).read_text(errors="replace").splitlines()
        except OSError:
            return None
        for line in reversed(lines):
            if line.startswith("{"):
                try:
                    return json.loads(line)
                except ValueError:
                    return None
        return None


def busy_cpu_seconds() -> float:
    """CPU seconds spent by the whole machine so far (all cores, not idle or iowait), from /proc/stat."""
    with open("/proc/stat") as fh:
        f = [int(x) for x in fh.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = f[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def wait_idle(max_wait: float, threshold: float = 0.3) -> float:
    """Wait (at most max_wait s) until other processes use < threshold cores over 1 s; returns that load.

    Why: on a shared 2-core machine a concurrent build or test doubles wall times; waiting for a
    quiet moment is cheaper than re-running. All waits together stay within IDLE_WAIT_BUDGET, so a
    machine that stays busy delays the benchmark by two minutes at most.
    """
    start = time.perf_counter()
    max_wait = min(max_wait, IDLE_WAIT_BUDGET[0])
    while True:
        b0, t0 = busy_cpu_seconds(), time.perf_counter()
        time.sleep(1.0)
        load = (busy_cpu_seconds() - b0) / (time.perf_counter() - t0)
        if load < threshold or time.perf_counter() - start >= max_wait:
            IDLE_WAIT_BUDGET[0] = max(0.0, IDLE_WAIT_BUDGET[0] - (time.perf_counter() - start - 1.0))
            return load


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        # the command name is in parentheses and may hold spaces: ppid is the 2nd field after ')'
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        kids.setdefault(ppid, []).append(int(name))
    return kids


def _pss_bytes(pid: int) -> int | None:
    """Proportional set size: shared pages split among the processes sharing them (None if unavailable)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            for line in fh:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def tree_rss_bytes(root: int) -> int:
    """Memory of ``root`` and all its descendants, from /proc: the sum of their PSS, so pages that forked workers
    share copy-on-write with their parent count once (a sum of RSS would count them in every process); RSS where
    the kernel gives no PSS."""
    kids = _children_map()
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        pss = _pss_bytes(pid)
        if pss is not None:
            total += pss
        else:
            try:
                with open(f"/proc/{pid}/statm", "rb") as fh:
                    total += int(fh.read().split()[1]) * PAGE
            except OSError:
                pass
        todo += kids.get(pid, [])
    return total


def repeated(times: int, cmd: list[str], **kw) -> Measured:
    """``measure`` run ``times`` times: the run of the median wall time (its CPU time, its logs), with the largest
    peak memory of all and every wall time in ``walls``. A run of a few seconds takes whatever the machine does
    in those seconds; HTA's single run of minutes averages that itself."""
    runs = [measure(cmd, **kw) for _ in range(max(1, times))]
    ok = [m for m in runs if m.rc == 0 and not m.timed_out]
    if len(ok) < len(runs):
        return next(m for m in runs if m not in ok)  # a failed run is the result: never hidden by a median
    mid = sorted(runs, key=lambda m: m.wall_s)[(len(runs) - 1) // 2]
    return replace(mid, peak_rss_mb=max(m.peak_rss_mb for m in runs), walls=tuple(m.wall_s for m in runs))


def measure(cmd: list[str], *, log_stem: Path, cwd: Path | None = None, env: dict | None = None,
            timeout: float = 1800, interval: float = 0.05, idle_wait: float = 0) -> Measured:
    """Run ``cmd`` to completion, sampling its process tree's RSS; kill its session on timeout."""
    if idle_wait > 0:
        load = wait_idle(idle_wait)
        if load >= 0.3:
            log(f"  machine busy ({load:.1f} cores used by others); running anyway"
                f" ({IDLE_WAIT_BUDGET[0]:.0f} s of waiting left)")
    out, err = Path(f"{log_stem}.out"), Path(f"{log_stem}.err")
    log_stem.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as fo, open(err, "wb") as fe:
        busy0 = busy_cpu_seconds()
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, cwd=cwd, env=env,
                                start_new_session=True)
        peak, timed_out = 0, False
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            peak = max(peak, tree_rss_bytes(proc.pid))
            if time.perf_counter() - t0 > timeout and not timed_out:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)  # the session we started for this command only
            time.sleep(interval)
        wall = time.perf_counter() - t0
        busy = busy_cpu_seconds() - busy0
    proc.returncode = os.waitstatus_to_exitcode(status)
    cpu = ru.ru_utime + ru.ru_stime
    # ru_maxrss (KiB) covers the child and the descendants it waited for: a floor under the sampled peak
    peak = max(peak, ru.ru_maxrss * 1024)
    return Measured(cmd, proc.returncode, wall, cpu, peak / 2**20, timed_out, str(out), str(err),
                    max(0.0, busy - cpu) / wall)


# --------------------------------------------------------------------------------------------
# Environments


def ensure_hta(spec: str) -> Path:
    """The HTA interpreter, creating benchmarks/.venv-hta and installing HTA there when missing."""
    py = HTA_VENV / "bin" / "python"
    if py.exists() and subprocess.run([py, "-c", "import hta.trace_analysis"], capture_output=True).returncode == 0:
        return py
    log(f"setting up {HTA_VENV} with {spec} (once)")
    base = shutil.which("python3") or sys.executable
    subprocess.run([base, "-m", "venv", str(HTA_VENV)], check=True)
    res = subprocess.run([py, "-m", "pip", "install", "-q", spec], capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"pip install {spec} failed:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    return py


def traceinspect_cmd(override: str | None) -> list[str] | None:
    """How to start traceinspect: --traceinspect, the console script beside this Python, or -m."""
    if override:
        return override.split()
    script = Path(sys.executable).parent / "traceinspect"
    if script.exists():
        return [str(script)]
    if shutil.which("traceinspect"):
        return [shutil.which("traceinspect")]
    probe = subprocess.run([sys.executable, "-c", "import traceinspect.cli.main"], capture_output=True, cwd=HERE)
    return [sys.executable, "-m", "traceinspect"] if probe.returncode == 0 else None


def version_of(python: str, dist: str) -> str:
    res = subprocess.run([python, "-c", f"from importlib.metadata import version; print(version({dist!r}))"],
                         capture_output=True, text=True)
    return res.stdout.strip() or "?"


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"cores": os.cpu_count(), "python": platform.python_version(), "os": platform.platform()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        mem = Path("/proc/meminfo").read_text().split("\n", 1)[0].split()[1]
        info["mem_gib"] = round(int(mem) / 2**20, 1)
    except OSError:
        pass
    return info


# --------------------------------------------------------------------------------------------
# Inputs


@dataclass
class Input:
    label: str
    dir: str
    ranks: int
    mb_per_rank: float
    json_mb: float  # uncompressed JSON, all ranks
    disk_mb: float
    events: int  # all ranks
    steps_per_rank: int
    factor: int
    build_s: float | None = None
    memory_events: int = 0  # [memory] instant events, all ranks (counted in the written files)
    source: str = ""  # the real trace it was scaled from


def parse_specs(sizes: str, ranks: str) -> list[tuple[int, float]]:
    """'200,1000' + '8x200' -> [(1, 200), (1, 1000), (8, 200)]."""
    specs = [(1, float(s)) for s in sizes.split(",") if s.strip()]
    for r in (x for x in ranks.split(",") if x.strip()):
        n, _, mb = r.lower().partition("x")
        if not mb:
            raise SystemExit(f"--ranks wants NxMB (e.g. 8x200), got {r!r}")
        specs.append((int(n), float(mb)))
    return specs


def count_memory_events(files: list[str]) -> int:
    """[memory] instant events in the written files, read in 8 MB chunks (a name split across two chunks is
    counted once: the chunks overlap by the name's length)."""
    needle = b'"[memory]"'
    n = 0
    for f in files:
        opener = gzip.open if f.endswith(".gz") else open
        with opener(f, "rb") as fh:
            tail = b""
            while chunk := fh.read(8 << 20):
                buf = tail + chunk
                n += buf.count(needle)
                tail = buf[-(len(needle) - 1):]
    return n


def build_input(source: Path, ranks: int, mb: float, gz: bool, data: Path, tag: str | None = None) -> Input:
    """Scale the source into data/<name>/ unless an identical build is already there. ``tag`` names the input
    (default: the source file's stem)."""
    from scale_trace import SCALER_VERSION  # run.py's folder is on sys.path when run as a script

    stem = tag or source.name.split(".")[0]
    name = f"{stem}-{mb:g}mb-{ranks}r" + ("-gz" if gz else "")
    out = data / name
    manifest = data / f"{name}.manifest.json"
    st = source.stat()
    key = {"source": str(source.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
           "mb": mb, "ranks": ranks, "gzip": gz, "scaler_version": SCALER_VERSION}
    if manifest.exists():
        m = json.loads(manifest.read_text())
        if m.get("key") == key and all(Path(f).exists() for f in m["result"]["files"]):
            log(f"reusing {out}")
            return Input(**m["input"])
    if out.exists():
        shutil.rmtree(out)
    log(f"building {out} ({ranks} x {mb:g} MB from {source})")
    cmd = [sys.executable, str(HERE / "scale_trace.py"), str(source), "--out-dir", str(out),
           "--target-mb", str(mb), "--ranks", str(ranks)] + (["--gzip"] if gz else [])
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"scaling failed:\n{res.stderr[-3000:]}")
    r = json.loads(res.stdout)
    inp = Input(
        label=f"{name} (scaled x{r['factor']})",
        dir=str(out),
        ranks=ranks,
        mb_per_rank=mb,
        json_mb=r["json_bytes_per_file"] * ranks / 1e6,
        disk_mb=sum(r["file_bytes"]) / 1e6,
        events=r["events_per_file"] * ranks,
        steps_per_rank=r["steps_per_file"],
        factor=r["factor"],
        build_s=round(time.perf_counter() - t0, 1),
        memory_events=count_memory_events(r["files"]),
        source=str(source.relative_to(ROOT.parent)) if source.is_relative_to(ROOT.parent) else str(source),
    )
    manifest.write_text(json.dumps({"key": key, "input": asdict(inp), "result": r}, indent=1))
    return inp


REAL_DEFAULT = HERE / "data" / "h200_tf24_real.pt.trace.json.gz"


def real_input(src: Path, data: Path) -> Input | None:
    """A real capture as an input, as it is (no scaling): gunzipped once into data/real-<stem>/ (a plain file, as a
    profiler writes it), or used in place when it is already plain JSON. None, with a line, when it is absent."""
    import gzip

    if not src.exists():
        log(f"no real trace at {src}: its row is skipped (benchmarks/README.md says how it was captured)")
        return None
    stem = src.name.split(".")[0]
    out = data / f"real-{stem}"
    plain = out / src.name.removesuffix(".gz")
    manifest = data / f"real-{stem}.manifest.json"
    st = src.stat()
    key = {"source": str(src.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    if src.name.endswith(".gz"):
        if not (manifest.exists() and json.loads(manifest.read_text()).get("key") == key and plain.exists()):
            log(f"gunzipping {src} into {out} (once)")
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            with gzip.open(src, "rb") as fi, open(plain, "wb") as fo:
                shutil.copyfileobj(fi, fo, 16 << 20)
            manifest.write_text(json.dumps({"key": key}))
    else:
        out, plain = src.parent, src
    # Every event has a "ph" key, written by Kineto as '"ph": '; steps are its ProfilerStep#N annotations (counted on
    # the bytes, chunk by chunk).
    import re

    events, steps = 0, set()
    step_re = re.compile(rb'"cat": "user_annotation", "name": "ProfilerStep#(\d+)"')
    with open(plain, "rb") as fh:
        tail = b""
        while chunk := fh.read(64 << 20):
            events += (tail[-4:] + chunk).count(b'"ph":')  # 4 bytes: a match split by the chunking, never one twice
            steps.update(step_re.findall(tail + chunk))  # a set: a step seen twice in the overlap counts once
            tail = chunk[-80:]
    mb = plain.stat().st_size / 1e6
    return Input(label=f"real {stem} (a capture, not scaled)", dir=str(out), ranks=1, mb_per_rank=mb, json_mb=mb,
                 disk_mb=mb, events=events, steps_per_rank=len(steps), factor=1)


# --------------------------------------------------------------------------------------------
# Running the tools


@dataclass
class Row:
    input: str
    tool: str
    wall_s: float | None
    cpu_s: float | None
    peak_rss_mb: float | None
    ok: bool
    others_load: float = 0.0
    note: str = ""
    extra: dict = field(default_factory=dict)


def _row(inp: Input, tool: str, m: Measured, extra: dict | None = None) -> Row:
    ok = m.rc == 0 and not m.timed_out
    note = "" if ok else ("timed out" if m.timed_out else f"failed, rc {m.rc}: see {m.stderr_path}")
    extra = {**(extra or {}), **({"walls": [round(w, 2) for w in m.walls]} if len(m.walls) > 1 else {})}
    return Row(inp.label, tool, m.wall_s, m.cpu_s, m.peak_rss_mb, ok, m.others_load, note, extra)


def clear_ti_cache(inp: Input, xdg: Path) -> None:
    """Remove traceinspect's cache (one folder, $TRACEINSPECT_CACHE_DIR below; see traceinspect/run/cache.py)."""
    shutil.rmtree(xdg / "traceinspect", ignore_errors=True)


def run_input(inp: Input, args, hta_py: Path | None, ti: list[str] | None, work: Path) -> list[Row]:
    rows: list[Row] = []
    logs = work / "logs"
    tag = Path(inp.dir).name

    def done(r: Row) -> Row:
        walls = r.extra.get("walls")
        log(f"  {r.tool:<8} {r.wall_s:7.1f} s wall {r.cpu_s:7.1f} s CPU {r.peak_rss_mb:7.0f} MB"
            f"  (others used {r.others_load:.1f} cores)" + (f"  {r.note}" if r.note else "")
            + (f"  median of {', '.join(f'{w:.1f}' for w in walls)} s" if walls else ""))
        rows.append(r)
        return r

    if not args.no_floor:
        m = repeated(args.repeat, [sys.executable, str(HERE / "floor.py"), inp.dir], log_stem=logs / f"{tag}.floor",
                     timeout=args.timeout, idle_wait=args.wait_idle)
        res = m.last_json() or {}
        done(_row(inp, "floor", m, {"decode_s": res.get("seconds"), "events": res.get("events")}))
    if hta_py is not None and inp.json_mb > args.hta_max_mb:
        log(f"  HTA skipped: {inp.json_mb:,.0f} MB of JSON is over --hta-max-mb {args.hta_max_mb:g} (HTA holds "
            "4.4-5.1x its JSON in memory: a 4 GB input ~20 GB)")
    elif hta_py is not None:
        m = measure([str(hta_py), "-I", str(HERE / "hta_driver.py"), inp.dir], log_stem=logs / f"{tag}.hta",
                    cwd=work, timeout=args.timeout, idle_wait=args.wait_idle)
        done(_row(inp, "HTA", m, m.last_json() or {}))
    if ti is not None:
        xdg = work / "xdg-cache"
        env = dict(os.environ, XDG_CACHE_HOME=str(xdg), TRACEINSPECT_CACHE_DIR=str(xdg / "traceinspect"))
        runs = [("ti", ["--no-cache"], True), ("ti cold", [], True), ("ti warm", [], False)]
        if args.baseline:  # the same --no-cache report by another build, just before this build's
            runs.insert(0, ("ti before", ["--no-cache"], True))
        for tool, extra_args, clear in runs:
            if clear:
                clear_ti_cache(inp, xdg)
            out_json = work / "reports" / f"{tag}.{tool.replace(' ', '-')}.json"
            out_json.parent.mkdir(parents=True, exist_ok=True)
            start = args.baseline.split() if tool == "ti before" else ti
            cmd = start + ["report", inp.dir, "--json", str(out_json)] + extra_args
            m = repeated(1 if tool == "ti cold" else args.repeat, cmd, log_stem=logs / f"{tag}.{tool.replace(' ', '-')}",
                         cwd=work, env=env, timeout=args.timeout, idle_wait=args.wait_idle)
            row = _row(inp, tool, m, {"report": str(out_json)})
            if tool == "ti cold" and row.ok and rows[-1].ok and row.cpu_s < 0.5 * rows[-1].cpu_s:
                row.note = "suspiciously fast for a cold cache: does clear_ti_cache() know every cache place?"
            done(row)
        clear_ti_cache(inp, xdg)
        same_report(rows)
    return rows


def same_report(rows: list[Row]) -> None:
    """Whether the ``ti before`` build wrote the same JSON report as this one (the folder's path aside): noted on
    the ``ti`` row as ``extra["same_report_as_before"]``."""
    by = {r.tool: r for r in rows if r.ok}
    before, now = by.get("ti before"), by.get("ti")
    if before is None or now is None:
        return
    docs = []
    for r in (before, now):
        d = json.loads(Path(r.extra["report"]).read_text())
        d.pop("source", None)
        docs.append(d)
    now.extra["same_report_as_before"] = docs[0] == docs[1]
    if docs[0] != docs[1]:
        now.note = "its report differs from ti before's"


# --------------------------------------------------------------------------------------------
# Reporting


def _ratio(a: float | None, b: float | None) -> str:
    if not a or not b:
        return "-"
    r = a / b
    return f"{r:.2f}x" if r < 10 else f"{r:.0f}x"


def table(inputs: list[Input], rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """Header and cells: one line per (input, tool), ratios against HTA and the floor of the same input."""
    head = ["input", "JSON MB", "events", "ranks", "tool", "wall s", "CPU s", "peak MB (PSS)",
            "time / HTA", "CPU / HTA", "memory / HTA", "time / floor", "others' load"]
    cells = []
    by_input = {i.label: i for i in inputs}
    for r in rows:
        inp = by_input[r.input]
        same = {x.tool: x for x in rows if x.input == r.input and x.ok}
        hta, floor = same.get("HTA"), same.get("floor")
        cells.append([
            r.input, f"{inp.json_mb:,.0f}", f"{inp.events:,}", str(inp.ranks), r.tool,
            f"{r.wall_s:.1f}" if r.ok else r.note, f"{r.cpu_s:.1f}" if r.ok else "-",
            f"{r.peak_rss_mb:,.0f}" if r.ok else "-",
            _ratio(r.wall_s, hta.wall_s) if r.ok and hta else "-",
            _ratio(r.cpu_s, hta.cpu_s) if r.ok and hta else "-",
            _ratio(r.peak_rss_mb, hta.peak_rss_mb) if r.ok and hta else "-",
            _ratio(r.wall_s, floor.wall_s) if r.ok and floor else "-",
            f"{r.others_load:.1f}",
        ])
    return head, cells


def markdown(head: list[str], cells: list[list[str]]) -> str:
    right = {1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12}
    lines = ["| " + " | ".join(head) + " |",
             "|" + "|".join("---:" if i in right else "---" for i in range(len(head))) + "|"]
    lines += ["| " + " | ".join(c) + " |" for c in cells]
    return "\n".join(lines)


def print_table(head: list[str], cells: list[list[str]]) -> None:
    """A rich table on a wide terminal; otherwise the markdown table (readable as text, too)."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        Console = None
    if Console is None or not sys.stdout.isatty() or shutil.get_terminal_size().columns < 130:
        print(markdown(head, cells))
        return
    t = Table(title="traceinspect vs HTA vs decode floor")
    for i, h in enumerate(head):
        t.add_column(h, justify="left" if i in (0, 4) else "right")
    for c in cells:
        t.add_row(*c)
    Console().print(t)


TARGET_SPEEDUP, TARGET_MEMORY, TARGET_FLOOR, TARGET_CACHED_S = 20.0, 0.25, 1.5, 0.5


def summary(inputs: list[Input], rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """One line per input against the targets: >= 20x HTA's speed at <= 25 % of its memory, within 1.5x of the
    decode floor, the cached re-report under 0.5 s. Each target cell says met, or by how much it is missed."""
    head = ["input", "ti --no-cache s", "ti CPU s", "ti peak MB", "HTA s", "HTA CPU s", "HTA peak MB",
            "speed-up (HTA / ti)", "CPU ratio (HTA / ti)", "memory (ti / HTA)", "floor s", "ti / floor",
            "cached re-report s", "ti / reference (size ratio)"]
    before = any(r.tool == "ti before" for r in rows)
    if before:
        head[1:1] = ["ti before s", "ti before CPU s", "speed-up before", "same report"]
    cells = []
    ref = next((i for i in inputs if i.label.startswith("real ")), inputs[0] if inputs else None)
    ref_ti = next((r for r in rows if ref and r.input == ref.label and r.tool == "ti" and r.ok), None)
    for inp in inputs:
        by = {r.tool: r for r in rows if r.input == inp.label and r.ok}
        ti, hta, fl, warm = by.get("ti"), by.get("HTA"), by.get("floor"), by.get("ti warm")
        tb = by.get("ti before")

        def num(r, attr, fmt="{:.1f}"):
            return fmt.format(getattr(r, attr)) if r else "-"

        def verdict(value, target, better_low, fmt):
            if value is None:
                return "-"
            ok = value <= target if better_low else value >= target
            return fmt.format(value) + (" (met)" if ok else f" (target {fmt.format(target)})")

        row = [
            inp.label, num(ti, "wall_s"), num(ti, "cpu_s"), num(ti, "peak_rss_mb", "{:,.0f}"), num(hta, "wall_s"),
            num(hta, "cpu_s"), num(hta, "peak_rss_mb", "{:,.0f}"),
            verdict(hta.wall_s / ti.wall_s if ti and hta else None, TARGET_SPEEDUP, False, "{:.1f}x"),
            f"{hta.cpu_s / ti.cpu_s:.1f}x" if ti and hta and ti.cpu_s else "-",
            verdict(ti.peak_rss_mb / hta.peak_rss_mb if ti and hta else None, TARGET_MEMORY, True, "{:.0%}"),
            num(fl, "wall_s"),
            verdict(ti.wall_s / fl.wall_s if ti and fl else None, TARGET_FLOOR, True, "{:.2f}x"),
            verdict(warm.wall_s if warm else None, TARGET_CACHED_S, True, "{:.2f}"),
            f"{ti.wall_s / ref_ti.wall_s:.1f}x ({inp.json_mb / ref.json_mb:.1f}x)" if ti and ref_ti else "-",
        ]
        if before:
            same = ti.extra.get("same_report_as_before") if ti else None
            row[1:1] = [num(tb, "wall_s"), num(tb, "cpu_s"),
                        f"{hta.wall_s / tb.wall_s:.1f}x" if tb and hta else "-", "-" if same is None else
                        ("yes" if same else "NO")]
        cells.append(row)
    return head, cells


def write_results(path_md: Path, meta: dict, inputs: list[Input], rows: list[Row]) -> None:
    head, cells = table(inputs, rows)
    print_table(head, cells)
    s_head, s_cells = summary(inputs, rows)
    print()
    print(markdown(s_head, s_cells))
    v = meta["versions"]
    md = [
        "# traceinspect benchmark results",
        "",
        f"Run {meta['date']} with `{meta['command']}`",
        f"on {meta['machine'].get('cpu', '?')}, {meta['machine']['cores']} cores, "
        f"{meta['machine'].get('mem_gib', '?')} GiB, Python {meta['machine']['python']}; "
        f"traceinspect {v.get('traceinspect', '-')}, HTA {v.get('hta', '-')}, msgspec {v.get('msgspec', '-')}.",
        "",
        "Inputs labelled *real* are captures as the profiler wrote them; the others are **scaled copies of a real "
        f"trace** (`{meta['source']}`, and for the memory-heavy inputs named `hta_v100_memory-...`, "
        f"`{meta.get('memory_source', '-')}`: its ProfilerSteps replicated by "
        "`benchmarks/scale_trace.py`, each file marked `\"traceinspect_scaled\"`), generated, not captures. "
        "JSON MB is the uncompressed size of all rank files of the input.",
        "",
        "Against the targets (speed-up = HTA wall s / traceinspect `--no-cache` wall s; the floor and the cached "
        "re-report measured in the same run):",
        "",
        markdown(s_head, s_cells),
        "",
        "Every run:",
        "",
        markdown(head, cells),
        "",
        "Ratios are tool / HTA and tool / floor on the same input: below 1x means less time (or memory) than "
        "HTA; the floor (read + gunzip + bare msgspec decode of the fields an analysis needs, one core) is "
        "the least any JSON reader can do, so `time / floor` says how many decodes' worth the tool spends. "
        "`CPU / HTA` compares CPU seconds (all processes of the tool), which a busy machine distorts less. "
        "`ti` = `traceinspect report DIR --json OUT --no-cache`; `ti cold` = first run with the cache "
        "enabled (decodes and writes it); `ti warm` = the re-report from the cache. The floor, `ti` and `ti warm` "
        "run `--repeat` times each (3 by default) and show the run of median wall time (its CPU s; the peak memory "
        "of all of them; every wall time in the JSON results, `walls`): a run of a few seconds takes whatever "
        "the machine does in those seconds, where HTA's one run of minutes averages it. HTA and `ti cold` run once. "
        "Peak memory is the largest sum of PSS over the process tree (workers included; pages shared copy-on-write count once), never below the largest single process's ru_maxrss. `others' load` is the number of "
        "cores that other processes on the machine used on average during the run (from /proc/stat): with 2 "
        "cores, anything above ~0.2 inflates wall times. See benchmarks/README.md.",
        "",
    ]
    busy = [r for r in rows if r.ok and r.others_load > 0.2]
    if busy:
        md += [f"**Warning:** other processes competed for the CPU during {len(busy)} of {len(rows)} runs (up to "
               f"{max(r.others_load for r in busy):.1f} cores); their wall times and time ratios are inflated. CPU s "
               "and CPU / HTA are much less affected (but CPU s adds up all workers of a parallel run). Re-run on "
               "an idle machine for wall times to quote.", ""]
    for r in rows:
        if r.ok and r.note:
            md.append(f"- {r.tool} on {r.input}: {r.note}")
        sec = r.extra.get("seconds") if r.tool == "HTA" else None
        if sec:
            md.append(f"- HTA phases on {r.input}: " + ", ".join(f"{k} {v:.1f} s" for k, v in sec.items()))
    md.append("")
    for inp in inputs:
        md.append(f"- {inp.label}: `{_rel(inp.dir)}`, {inp.ranks} rank file(s), factor {inp.factor}, "
                  f"{inp.steps_per_rank} ProfilerSteps per rank, {inp.disk_mb:,.0f} MB on disk, "
                  f"{inp.events:,} events of which {inp.memory_events:,} [memory] instant events"
                  + (f", scaled from `{inp.source}`" if inp.source else ""))
    path_md.parent.mkdir(parents=True, exist_ok=True)
    path_md.write_text("\n".join(md) + "\n")
    path_md.with_suffix(".json").write_text(json.dumps(
        {**meta, "inputs": [asdict(i) for i in inputs], "rows": [asdict(r) for r in rows]}, indent=1, default=str))
    log(f"wrote {path_md} and {path_md.with_suffix('.json')}")


def _rel(p) -> str:
    """A path relative to the repository when it is inside it (results are committed)."""
    try:
        return str(Path(p).resolve().relative_to(ROOT))
    except ValueError:
        return str(p)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--sizes", default="200,1000",
                   help="single-rank inputs, MB of JSON each, comma-separated ('' for none) [200,1000]")
    p.add_argument("--big", action="store_true",
                   help=f"add the {'/'.join(f'{m / 1000:g} GB' for m in BIG_MB)} scaled inputs (--sizes "
                        f"{','.join(map(str, BIG_MB))}): memory bounded by Config.memory_limit_bytes")
    p.add_argument("--hta-max-mb", type=float, default=HTA_MAX_MB, metavar="MB",
                   help=f"HTA is not run on inputs above this many MB of JSON: it holds 4.4-5.1x the JSON in memory "
                        f"[{HTA_MAX_MB:g}]")
    p.add_argument("--ranks", default="", help="multi-rank inputs as NxMB per rank, comma-separated, e.g. 8x50 []")
    p.add_argument("--real", type=Path, action="append",
                   help=f"a real capture to run as it is (repeatable) [{_rel(REAL_DEFAULT)}, when present]")
    p.add_argument("--no-real", action="store_true", help="no real-capture input")
    p.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="the real trace to scale")
    p.add_argument("--memory-sizes", default="1000",
                   help="memory-heavy single-rank inputs, MB of JSON each, scaled from --memory-source ('' for none) "
                        "[1000]")
    p.add_argument("--memory-source", type=Path, default=MEMORY_SOURCE,
                   help="the real memory-heavy trace to scale (many [memory] events)")
    p.add_argument("--gzip", action="store_true", help="write the inputs as .json.gz (tools then gunzip too)")
    p.add_argument("--no-hta", action="store_true", help="skip HTA")
    p.add_argument("--no-traceinspect", action="store_true", help="skip traceinspect")
    p.add_argument("--no-floor", action="store_true", help="skip the decode floor")
    p.add_argument("--hta-spec", default=HTA_SPEC, help=f"pip requirement for HTA's venv [{HTA_SPEC}]")
    p.add_argument("--traceinspect", metavar="CMD", help="how to start traceinspect (default: the console script)")
    p.add_argument("--baseline", metavar="CMD",
                   help="another traceinspect build to run first on each input (row 'ti before', --no-cache), e.g. "
                        "'env PYTHONPATH=OLD_TREE .venv/bin/python -m traceinspect'; its report must equal this one's")
    p.add_argument("--repeat", type=int, default=3, metavar="N",
                   help="run the floor, ti and ti warm N times each and keep the run of median wall time (HTA and "
                        "ti cold run once) [3]")
    p.add_argument("--timeout", type=float, default=1800, help="seconds before one tool run is killed [1800]")
    p.add_argument("--wait-idle", type=float, default=20, metavar="S",
                   help="before each run, wait up to S seconds for other processes to go quiet (120 s in all) [20]")
    p.add_argument("--data", type=Path, default=HERE / "data", help="where inputs and logs go [benchmarks/data]")
    p.add_argument("--out", type=Path, default=HERE / "results.md", help="markdown results (+ .json beside it)")
    args = p.parse_args(argv)

    source = args.source.resolve()
    if not source.exists():
        raise SystemExit(f"no source trace at {source}")
    data = args.data.resolve()
    work = data / "work"
    work.mkdir(parents=True, exist_ok=True)

    hta_py = None
    if not args.no_hta:
        try:
            hta_py = ensure_hta(args.hta_spec)
        except (SystemExit, OSError, subprocess.SubprocessError) as exc:
            log(f"HTA skipped: its venv could not be made ({str(exc).splitlines()[0][:200]})")
    ti = None
    if not args.no_traceinspect:
        ti = traceinspect_cmd(args.traceinspect)
        if ti is None:
            log("traceinspect is not installed (pip install -e .); running without it")
    versions = {"msgspec": version_of(sys.executable, "msgspec")}
    if hta_py:
        versions["hta"] = version_of(str(hta_py), "HolisticTraceAnalysis")
    if ti:
        versions["traceinspect"] = version_of(sys.executable, "traceinspect")
        # Byte-compile the package once, as an installed wheel is: with PYTHONDONTWRITEBYTECODE set (some
        # machines set it) every run would otherwise recompile traceinspect's sources (0.1-0.15 s a run).
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "traceinspect")], check=False)

    inputs = []
    if not args.no_real:
        for src in args.real or [REAL_DEFAULT]:
            inp = real_input(src.resolve(), data)
            if inp is not None:
                inputs.append(inp)
    sizes = ",".join(x for x in [args.sizes] + ([",".join(map(str, BIG_MB))] if args.big else []) if x)
    inputs += [build_input(source, n, mb, args.gzip, data) for n, mb in parse_specs(sizes, args.ranks)]
    mem_source = args.memory_source.resolve()
    if args.memory_sizes and not mem_source.exists():
        log(f"memory-heavy inputs skipped: no trace at {mem_source}")
    elif args.memory_sizes:
        inputs += [build_input(mem_source, n, mb, args.gzip, data, tag=mem_source.parent.name)
                   for n, mb in parse_specs(args.memory_sizes, "")]
    rows: list[Row] = []
    for inp in inputs:
        log(f"{inp.label}: {inp.json_mb:,.0f} MB JSON, {inp.events:,} events ({inp.memory_events:,} [memory]), "
            f"{inp.ranks} rank file(s)")
        rows += run_input(inp, args, hta_py, ti, work)
    try:
        source_shown = str(source.relative_to(ROOT.parent))
    except ValueError:
        source_shown = str(source)
    meta = {
        "date": dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "command": " ".join(["python benchmarks/run.py"] + (argv if argv is not None else sys.argv[1:])),
        "machine": machine(),
        "versions": versions,
        "source": source_shown,
        "memory_source": str(mem_source.relative_to(ROOT.parent)) if mem_source.is_relative_to(ROOT.parent)
        else str(mem_source),
        "total_s": round(time.perf_counter() - T_START, 1),
    }
    write_results(args.out, meta, inputs, rows)
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
