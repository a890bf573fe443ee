"""benchmarks/run.py's memory-heavy input: the [memory] events it reports for an input are the trace's own, counted
here with the standard library's json on the public V100 trace recorded with profile_memory."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from public_traces import PUBLIC, need, only_file, raw_events

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
_spec = importlib.util.spec_from_file_location("bench_run", ROOT / "benchmarks" / "run.py")
run = importlib.util.module_from_spec(_spec)  # by path: tests/run/ is another package named run
sys.modules["bench_run"] = run
_spec.loader.exec_module(run)


def test_memory_events_are_counted_as_the_trace_holds_them():
    path = only_file(need(PUBLIC / "hta_v100_memory"))
    want = sum(1 for e in raw_events(path)["traceEvents"] if e.get("name") == "[memory]")
    assert want == 28_010  # the public traces' README: 28,010 [memory] events
    assert run.count_memory_events([str(path)]) == want
    assert run.MEMORY_SOURCE.name == path.name and run.MEMORY_SOURCE.parent.name == "hta_v100_memory"
