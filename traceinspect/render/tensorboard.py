"""The per-step breakdown and the findings as TensorBoard summaries, beside the profiler's own runs.

``write_tensorboard(d, logdir)`` writes one run per rank, ``<logdir>/traceinspect/rank<r>``, so TensorBoard shows
our numbers next to the torch-tb-profiler runs of the same folder:

* scalars (global step = the profiler step number, values in milliseconds / megabytes):
  ``step/wall_ms``, ``breakdown_ms/<category>`` for each breakdown category of the rank (GPU: compute,
  comm_exposed, h2d_exposed, d2h_exposed, d2d_exposed, memset_exposed, idle; CPU-only: dataloader, forward,
  backward, comm, optimizer, other), ``step/gpu_busy_ms`` (GPU ranks), ``cpu/dataloader_ms``, ``cpu/sync_ms``,
  ``copies_mb/h2d``, ``copies_mb/pageable_h2d``, ``copies_mb/d2h`` (a value the report holds as null, such as the
  copies of a CPU-only run, is not written: unknown is never a 0);
* text (Markdown, at the rank's last step): ``traceinspect/verdict`` and ``traceinspect/findings`` (the findings
  that concern the rank, with evidence and fix). The Text tab renders Markdown, so every string is written through
  ``safe.markdown`` and the fix as an indented code block of visible, bounded lines (``sections.fix_lines``).

It uses only the ``tensorboard`` package (its event-file writer and protobufs), imported lazily: no TensorFlow, no
torch. Our own event files end in ``.traceinspect``; writing again replaces them, so runs do not pile up copies.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..errors import UsageError
from ..report.doc import RankDoc, ReportDoc
from . import safe, sections
from .document import given, report_doc
from .sections import verdict

md = safe.markdown

RUN_DIR = "traceinspect"
SUFFIX = ".traceinspect"
MISSING = "tensorboard is not installed: pip install 'traceinspect[tensorboard]'"


def _tb():
    try:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.plugins.text import metadata as text_metadata
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
        from tensorboard.util import tensor_util
    except ImportError:
        raise UsageError(MISSING) from None
    return event_pb2, summary_pb2, text_metadata, EventFileWriter, tensor_util


def scalar_rows(rank: RankDoc) -> list[tuple[int, str, float]]:
    """(step, tag, value) of one rank: every scalar we write, in display units (ms, MB). Formatting only."""
    rows = []
    for s in rank.steps:
        step = int(s.step)

        def put(tag, v, scale):
            v = given(v)
            if v is not None:
                rows.append((step, tag, float(v) / scale))

        put("step/wall_ms", s.wall_us, 1e3)
        for k, v in s.breakdown_us.items():
            put(f"breakdown_ms/{k}", v, 1e3)
        if rank.basis == "gpu":
            put("step/gpu_busy_ms", s.gpu_busy_us, 1e3)
        put("cpu/dataloader_ms", s.dataloader_us, 1e3)
        put("cpu/sync_ms", s.sync_us, 1e3)
        put("copies_mb/h2d", s.h2d_bytes, 1e6)
        put("copies_mb/pageable_h2d", s.pageable_h2d_bytes, 1e6)
        put("copies_mb/d2h", s.d2h_bytes, 1e6)
    return rows


def findings_markdown(d: ReportDoc, rank: int) -> str:
    """The findings that concern ``rank`` as Markdown for TensorBoard's Text tab: blank lines around every list and
    code block (the Text tab's Markdown needs them), values written by ``format``."""
    fs = [f for f in d.findings if rank in f.ranks]
    if not fs:
        return "No problems found on this rank."
    out = []
    for f in fs:
        out += [f"### [{md(f.severity)}] {md(f.id)}: {md(sections.title(f))}", "", md(sections.finding_meta(f)), ""]
        out += [f"* {md(line)}" for line in sections.evidence_lines(f, rank=rank, items=3)]
        out += ["", "Fix:", ""]
        out += ["    " + line for line in sections.fix_lines(f)]
        out.append("")
    return "\n".join(out)


def run_dir(logdir, rank: int) -> Path:
    return Path(logdir) / RUN_DIR / f"rank{rank}"


def write_tensorboard(d: ReportDoc | dict, logdir) -> str:
    """Write every rank's run under ``<logdir>/traceinspect``; returns that folder. ``logdir`` may be a trace file
    (its folder is used) or a new folder (made). One-line ``UsageError`` when tensorboard is missing or the folder
    cannot be written (a read-only trace folder: pass another with ``--tensorboard DIR``)."""
    event_pb2, summary_pb2, text_metadata, EventFileWriter, tensor_util = _tb()
    import numpy as np

    d = report_doc(d)

    base = Path(logdir)
    if base.is_file():
        base = base.parent
    root = base / RUN_DIR
    now = time.time()
    try:
        for r in d.ranks:
            rdir = run_dir(base, r.rank)
            rdir.mkdir(parents=True, exist_ok=True)
            for old in rdir.glob(f"events.out.tfevents.*{SUFFIX}"):
                old.unlink()
            w = EventFileWriter(str(rdir), filename_suffix=SUFFIX)
            try:
                for step, tag, value in scalar_rows(r):
                    summ = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
                    w.add_event(event_pb2.Event(wall_time=now, step=step, summary=summ))
                last = max((int(s.step) for s in r.steps), default=0)
                meta = text_metadata.create_summary_metadata(display_name=None, description="")
                for tag, text in (("traceinspect/verdict", md(verdict(d))),
                                  ("traceinspect/findings", findings_markdown(d, r.rank))):
                    tensor = tensor_util.make_tensor_proto(text.encode("utf-8"), dtype=np.object_)
                    summ = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, metadata=meta, tensor=tensor)])
                    w.add_event(event_pb2.Event(wall_time=now, step=last, summary=summ))
            finally:
                w.close()
    except OSError as exc:
        raise UsageError(f"cannot write TensorBoard summaries under {root}: {exc.strerror or exc} "
                         "(choose a writable folder with --tensorboard DIR)") from None
    return str(root)


def write_tensorboard_folder(d: ReportDoc | dict, logdir, write=None) -> str:
    """The ``--tensorboard`` output (``render/formats.py``): ``write_tensorboard``, and the line that says where."""
    return f"TensorBoard summaries written to {write_tensorboard(d, logdir)}"
