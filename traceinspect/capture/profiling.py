"""Capture per-rank PyTorch profiler traces that ``traceinspect report`` can read.

Any training loop can use it::

    import traceinspect.capture

    with traceinspect.capture.profile("./log/profile_ddp", wait=1, warmup=1, active=3,
                                      dataloader=loader, model=ddp_model,
                                      accumulation_steps=4, amp_dtype=torch.bfloat16) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()          # once per optimizer step

Why a wrapper and not plain ``torch.profiler.profile``:

* the file layout is fixed (``rank{r}.<time_ns>.pt.trace.json.gz`` through
  ``torch.profiler.tensorboard_trace_handler``), so the analyzer, TensorBoard and
  torch-tb-profiler all open the same folder and every file says which rank wrote it;
* the job's settings that a trace does not show (DataLoader workers, DDP bucket
  size, gradient accumulation, AMP dtype, ...) are written *into* every trace
  window as a top-level ``"traceinspect"`` JSON key, so the analyzer can explain
  a finding ("pin_memory=False") instead of guessing it;
* the two silent failures users hit get a clear error: a loop that ends before
  the schedule's active window (no trace at all) and an output folder that
  cannot be written (the torch handler only fails at the end of the window).

This module imports torch lazily inside functions so that importing it (for
``CaptureError`` or ``required_steps``) never needs torch; of the rest of traceinspect it imports only
``errors.py`` (standard library only), so it runs on a machine that has only torch installed. What is recorded about the job
(DataLoader, DDP, AMP, rank) is :mod:`~traceinspect.capture.metadata`'s, re-exported here.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Mapping

from .metadata import (METADATA_KEY, METADATA_SCHEMA, _grad_scaler_flag, _json_safe, amp_dtype_name,  # noqa: F401
                       describe_dataloader, describe_ddp, describe_device_memory, describe_job, detect_rank)
from .loader_probe import LoaderTimer, probe_loader
from .threads import ThreadClock
from .schedule import (CaptureError, _check_schedule, _check_writable, recorded_step_numbers,  # noqa: F401
                       required_steps)

__all__ = [
    "CaptureError",
    "Capture",
    "profile",
    "probe_loader",
    "required_steps",
    "detect_rank",
    "describe_dataloader",
    "describe_ddp",
    "amp_dtype_name",
    "METADATA_KEY",
    "METADATA_SCHEMA",
]


# --------------------------------------------------------------------------- the context


class Capture:
    """A running capture: ``.step()`` once per training step; the torch profiler is ``.profiler``.

    Create it with :func:`profile`. Attributes that are useful after the loop:

    * ``files``: trace files this rank wrote (one per completed active window);
    * ``steps``: how many times ``step()`` was called;
    * ``metadata``: the dict written under the ``"traceinspect"`` key.

    Unknown attributes are forwarded to the torch profiler, so code written for
    ``torch.profiler.profile`` (``prof.key_averages()``, ``prof.add_metadata_json``)
    keeps working.
    """

    def __init__(self, out_dir: str | os.PathLike, *, wait: int = 1, warmup: int = 1,
                 active: int = 3, repeat: int = 1, skip_first: int = 0,
                 record_shapes: bool = False, profile_memory: bool = False,
                 with_stack: bool = False, gzip: bool = True, dataloader: Any = None,
                 model: Any = None, accumulation_steps: int | None = None, batch_size: int | None = None,
                 no_sync: bool | None = None, amp_dtype: Any = None, grad_scaler: Any = None,
                 workload: Mapping[str, Any] | None = None, extra: Mapping[str, Any] | None = None,
                 probe_loader: bool = False, strict: bool = True, verbose: bool = True) -> None:
        _check_schedule(wait, warmup, active, repeat, skip_first)
        if accumulation_steps is not None and (isinstance(accumulation_steps, bool) or
                                               not isinstance(accumulation_steps, int) or
                                               accumulation_steps < 1):
            raise CaptureError(f"accumulation_steps must be an integer >= 1 (got {accumulation_steps!r})")
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                       or batch_size < 1):
            raise CaptureError(f"batch_size must be an integer >= 1 (got {batch_size!r})")
        self.out_dir = Path(out_dir)
        _check_writable(self.out_dir)
        self.wait, self.warmup, self.active = wait, warmup, active
        self.repeat, self.skip_first = repeat, skip_first
        self.record_shapes, self.profile_memory, self.with_stack = record_shapes, profile_memory, with_stack
        self.gzip = gzip
        self.strict = strict
        self.verbose = verbose
        self.required_steps = required_steps(wait, warmup, active, repeat, skip_first)
        self.steps = 0
        self.files: list[Path] = []
        self.rank, self.world_size = detect_rank()
        self.profiler: Any = None  # torch.profiler.profile, made in __enter__, kept after exit
        self._running = False
        self._job = describe_job(dataloader=dataloader, model=model, accumulation_steps=accumulation_steps,
                                 batch_size=batch_size,
                                 no_sync=no_sync, amp_dtype=amp_dtype, grad_scaler=grad_scaler, workload=workload,
                                 extra=extra)
        self._loader = dataloader
        self.probe_loader = probe_loader
        self._timer: LoaderTimer | None = None  # the workers' batch times during training (probe_loader=True)
        self._rec_start: float | None = None  # time.monotonic() when the current window started recording
        self._clock: ThreadClock | None = None  # the training process's threads' CPU time (probe_loader=True)
        self.metadata: dict[str, Any] = self._build_metadata()

    # -- metadata -----------------------------------------------------------------------

    def _build_metadata(self) -> dict[str, Any]:
        try:
            import torch

            torch_version = str(torch.__version__)
            cuda = bool(torch.cuda.is_available())
        except ImportError:  # pragma: no cover - profile() needs torch anyway
            torch_version, cuda = None, False
        return {
            "schema": METADATA_SCHEMA,
            "capture": {
                "wait": self.wait, "warmup": self.warmup, "active": self.active,
                "repeat": self.repeat, "skip_first": self.skip_first,
                "record_shapes": self.record_shapes, "profile_memory": self.profile_memory,
                "with_stack": self.with_stack, "gzip": self.gzip,
                "activities": ["cpu", "cuda"] if cuda else ["cpu"],
                "torch_version": torch_version,
            },
            "rank": self.rank,
            "world_size": self.world_size,
            **self._job,
        }

    def update_metadata(self, *, dataloader: Any = None, model: Any = None,
                        accumulation_steps: int | None = None, batch_size: int | None = None,
                        no_sync: bool | None = None,
                        amp_dtype: Any = None, grad_scaler: Any = None,
                        workload: Mapping[str, Any] | None = None,
                        extra: Mapping[str, Any] | None = None,
                        loader_probe: Mapping[str, Any] | None = None) -> None:
        """Add job settings known only after the capture started (e.g. a loader built later).

        Only the arguments given change; ``extra`` is merged key by key. The new
        values reach the current window (if recording) and every later one.
        """
        if dataloader is not None:
            self._job["dataloader"] = describe_dataloader(dataloader)
            self._loader = dataloader
        if loader_probe is not None:
            self._job["loader_probe"] = _json_safe(dict(loader_probe))
        if model is not None:
            self._job["ddp"] = describe_ddp(model)
        if accumulation_steps is not None:
            self._job["accumulation_steps"] = accumulation_steps
        if batch_size is not None:
            self._job["batch_size"] = batch_size
        if no_sync is not None:
            self._job["no_sync"] = no_sync
        if amp_dtype is not None:
            self._job["amp_dtype"] = amp_dtype_name(amp_dtype)
        if grad_scaler is not None:
            self._job["grad_scaler"] = _grad_scaler_flag(grad_scaler)
        if workload is not None:
            self._job["workload"] = _json_safe(dict(workload))
        if extra is not None:
            self._job["extra"] = {**(self._job["extra"] or {}), **_json_safe(dict(extra))}
        self.metadata = self._build_metadata()
        if self._running:
            self._install_metadata(now=True)

    def _metadata_json(self) -> str:
        return json.dumps(self.metadata, allow_nan=False, sort_keys=True)

    def _install_metadata(self, now: bool = False) -> None:
        """Make the metadata part of every window.

        ``preset_metadata_json`` (torch >= 2.3) is re-applied by torch at the start
        of each active window, which is what makes repeat > 1 windows carry it too.
        ``add_metadata_json`` only reaches the window being recorded, so it is used
        for updates mid-window and, on older torch, on every recording step.
        """
        value = self._metadata_json()
        preset = getattr(self.profiler, "preset_metadata_json", None)
        if callable(preset):
            preset(METADATA_KEY, value)
        if (now or not callable(preset)) and self._recording():
            self.profiler.add_metadata_json(METADATA_KEY, value)

    def _window_ends(self) -> bool:
        """Whether the coming ``profiler.step()`` ends the window being recorded (and writes its trace)."""
        from torch.profiler import ProfilerAction

        return getattr(self.profiler, "current_action", None) == ProfilerAction.RECORD_AND_SAVE

    def _recording(self) -> bool:
        from torch.profiler import ProfilerAction

        return getattr(self.profiler, "current_action", None) in (
            ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)

    # -- the context --------------------------------------------------------------------

    def _on_trace_ready(self, prof: Any) -> None:
        """torch's tensorboard handler, plus noting which file it wrote."""
        before = set(self.out_dir.glob(f"rank{self.rank}.*.pt.trace.json*"))
        self._handler(prof)
        self.files.extend(sorted(set(self.out_dir.glob(f"rank{self.rank}.*.pt.trace.json*")) - before))

    def __enter__(self) -> "Capture":
        import torch
        from torch.profiler import ProfilerActivity, schedule, tensorboard_trace_handler

        if self.probe_loader and self._loader is not None and self._job.get("loader_probe") is None:
            # the timer first: it must be on the loader before any iterator starts its workers (the probe's, which a
            # persistent loader keeps for the loop)
            self._timer = LoaderTimer(self._loader)
            # before the profiler starts: the probe's batches must not be in the trace, nor the loop's in the probe
            self._job["loader_probe"] = _json_safe(probe_loader(self._loader))
        if self.probe_loader:
            self._clock = ThreadClock()
        # the rank may have changed since __init__ if the process group came up in between, and the model may be on
        # the device by now
        self.rank, self.world_size = detect_rank()
        self._job["device_memory"] = describe_device_memory()
        self.metadata = self._build_metadata()
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        self._handler = tensorboard_trace_handler(str(self.out_dir), worker_name=f"rank{self.rank}",
                                                  use_gzip=self.gzip)
        with warnings.catch_warnings():
            # warmup=0 is a legal (if skewed) choice; torch warns about it on every rank
            warnings.filterwarnings("ignore", message="Profiler won't be using warmup")
            sched = schedule(wait=self.wait, warmup=self.warmup, active=self.active,
                             repeat=self.repeat, skip_first=self.skip_first)
        self.profiler = torch.profiler.profile(
            activities=activities, schedule=sched, on_trace_ready=self._on_trace_ready,
            record_shapes=self.record_shapes, profile_memory=self.profile_memory,
            with_stack=self.with_stack)
        self._install_metadata()
        with warnings.catch_warnings():  # a schedule without wait prepares its first window here
            warnings.filterwarnings("ignore", message=".*Profiler clears events at the end of each cycle")
            self.profiler.__enter__()
        self._running = True
        if not callable(getattr(self.profiler, "preset_metadata_json", None)):
            self._install_metadata()  # schedule may start recording at step 0
        self._note_recording()
        return self

    def _note_recording(self) -> None:
        """Remember when the current window began recording (the loader timing covers the recorded steps)."""
        if not self._recording():
            self._rec_start = None
        elif self._rec_start is None:
            self._rec_start = time.monotonic()
            if self._clock is not None:
                self._clock.start()

    def _record_timings(self) -> None:
        """Put the workers' batch times and the process's thread times of this window into its metadata (at its
        last step, before the step that writes it: reading them costs about a millisecond, so not every step)."""
        if self._rec_start is None or not self._recording():
            return
        changed = False
        # the metadata is the job's keys over the capture's: only these keys change, nothing to rebuild
        if self._timer is not None and self._timer.installed:
            self._job["loader_timing"] = self.metadata["loader_timing"] = _json_safe(self._timer.stats(self._rec_start))
            changed = True
        threads = self._clock.stats() if self._clock is not None else None
        if threads is not None:
            self._job["process_threads"] = self.metadata["process_threads"] = _json_safe(threads)
            changed = True
        if changed:
            self._install_metadata(now=True)

    def step(self) -> None:
        """Mark the end of one training step (call it once per optimizer step)."""
        if not self._running:
            raise CaptureError("prof.step() called outside the `with traceinspect.capture.profile(...)` block")
        self.steps += 1
        if self._window_ends():  # the timings go in once, before the step that writes the window
            self._record_timings()
        if self._starts_new_cycle():
            # each window goes to its own file on purpose; torch's "clears events at the end
            # of each cycle" warning would only confuse. Filtering only on these steps keeps
            # the user's own warning filters (and their once-registries) untouched elsewhere.
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*Profiler clears events at the end of each cycle")
                self.profiler.step()
        else:
            self.profiler.step()
        if not callable(getattr(self.profiler, "preset_metadata_json", None)):
            self._install_metadata()
        self._note_recording()

    def _starts_new_cycle(self) -> bool:
        """Whether the coming ``profiler.step()`` prepares a new window (after the first)."""
        from torch.profiler import ProfilerAction

        prof = self.profiler
        if not hasattr(prof, "schedule"):
            return False
        idle = (ProfilerAction.NONE, ProfilerAction.RECORD_AND_SAVE)
        return prof.current_action in idle and prof.schedule(prof.step_num + 1) != ProfilerAction.NONE

    def __exit__(self, exc_type, exc, tb) -> bool:
        self._running = False
        if exc_type is None:
            self._record_timings()  # a window the loop's end cuts short is written on exit
        self.profiler.__exit__(exc_type, exc, tb)
        if exc_type is not None:
            return False  # never hide the training loop's own error behind ours
        if self.steps < self.required_steps:
            msg = self.too_few_steps_message()
            if self.strict:
                raise CaptureError(msg)
            warnings.warn(msg, stacklevel=2)
        elif self.verbose and self.rank == 0:
            self._announce()
        return False

    def too_few_steps_message(self) -> str:
        """The one-line explanation for a loop that ended before the schedule's last window."""
        sched = (f"skip_first={self.skip_first}, wait={self.wait}, warmup={self.warmup}, "
                 f"active={self.active}, repeat={self.repeat}")
        written = (f"only a partial trace was written ({len(self.files)} file(s))" if self.files
                   else "no trace was written")
        return (f"the loop called prof.step() {self.steps} time(s) but the profiler schedule "
                f"({sched}) needs {self.required_steps}; {written} -- run at least "
                f"{self.required_steps} steps or lower wait/warmup/active")

    def _announce(self) -> None:
        n = len(self.files)
        print(f"traceinspect: rank 0 wrote {n} trace file(s) to {self.out_dir} "
              f"(world size {self.world_size}; each rank writes rank<r>.*.pt.trace.json"
              f"{'.gz' if self.gzip else ''}); next: traceinspect report {self.out_dir}",
              file=sys.stderr, flush=True)

    def __getattr__(self, name: str) -> Any:
        # only reached for attributes Capture does not define: forward to torch's profiler
        profiler = self.__dict__.get("profiler")
        if profiler is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(profiler, name)


def profile(out_dir: str | os.PathLike = "./log/profile_ddp", *, wait: int = 1, warmup: int = 1,
            active: int = 3, repeat: int = 1, skip_first: int = 0, record_shapes: bool = False,
            profile_memory: bool = False, with_stack: bool = False, gzip: bool = True,
            dataloader: Any = None, model: Any = None, accumulation_steps: int | None = None,
            batch_size: int | None = None, no_sync: bool | None = None, amp_dtype: Any = None, grad_scaler: Any = None,
            workload: Mapping[str, Any] | None = None, extra: Mapping[str, Any] | None = None,
            probe_loader: bool = False, strict: bool = True, verbose: bool = True) -> Capture:
    """Profile a training loop into ``out_dir`` as per-rank Chrome traces (use as a context manager).

    Schedule: ``skip_first`` idle steps, then ``repeat`` cycles of ``wait`` idle,
    ``warmup`` (profiler on, results dropped) and ``active`` recorded steps; each
    cycle's active steps become one file ``rank{r}.<time_ns>.pt.trace.json[.gz]``.
    ``repeat=0`` keeps cycling until the loop ends. Call ``prof.step()`` once per
    optimizer step, so one ``ProfilerStep#N`` is one training step.

    Recording options (``record_shapes``, ``profile_memory``, ``with_stack``) cost
    overhead; leave them off for timing. ``gzip`` compresses the files (about 10x).

    Job description written into every trace window, under ``"traceinspect"``:
    ``dataloader`` (a DataLoader: workers, pinning, prefetch, batch size are read
    off it), ``model`` (a DistributedDataParallel: bucket size, bucket view,
    static graph, unused-parameter search), ``batch_size`` (samples per micro-batch on this rank, where no
    ``dataloader`` says it), ``accumulation_steps`` (micro-batches
    per optimizer step), ``no_sync`` (whether micro-batches skip the all-reduce),
    ``amp_dtype`` (autocast dtype or None), ``grad_scaler`` (GradScaler or bool),
    ``workload`` and ``extra`` (any JSON-able dicts of your own).

    ``probe_loader``: time the DataLoader during the recorded steps: its workers' batches (``loader_timing``) and
    the CPU time of each thread of the training process (``process_threads``, :mod:`.threads`: the loader's pinning
    thread among them). The report then caps what any fix but the loader's may save at the step beyond what its
    batches take the loader. Before the profiler starts it also times a few batches drawn with no training work
    (``loader_probe``, recorded only: no bound); those come from fresh iterators, so enable it before the loop
    first iterates the loader.

    ``strict``: when the loop ends normally with fewer steps than the schedule
    needs, raise :class:`CaptureError` (default) or only warn. ``verbose``: rank 0
    prints where the traces went.

    Raises :class:`CaptureError` at once for a bad schedule or an output folder
    that cannot be written.
    """
    return Capture(out_dir, wait=wait, warmup=warmup, active=active, repeat=repeat,
                   skip_first=skip_first, record_shapes=record_shapes,
                   profile_memory=profile_memory, with_stack=with_stack, gzip=gzip,
                   dataloader=dataloader, model=model, accumulation_steps=accumulation_steps, batch_size=batch_size,
                   no_sync=no_sync, amp_dtype=amp_dtype, grad_scaler=grad_scaler,
                   workload=workload, extra=extra, probe_loader=probe_loader, strict=strict, verbose=verbose)
