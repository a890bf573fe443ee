"""Small helpers shared by rules: step selection and formatting of evidence numbers."""

from __future__ import annotations

import msgspec
import numpy as np
import pandas as pd


def gbps(nbytes: float, us: float) -> float | None:
    """GB/s (1e9 bytes per second) from bytes and microseconds."""
    return float(nbytes) / float(us) / 1e3 if us and us > 0 else None


NAME_LIMIT = 80  # characters of a trace's name a fix quotes; the JSON evidence keeps it whole


def shown(name, limit: int = NAME_LIMIT) -> str:
    """A name read from a trace as a title shows it: on one line (control characters, line and paragraph
    separators become spaces) and at most ``limit`` characters (an ellipsis marks the cut)."""
    text = "".join(ch if ch.isprintable() else " " for ch in str(name))
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def quoted(name, limit: int = NAME_LIMIT) -> str:
    """A name read from a trace as a fix may show it, inside a comment: ``shown``, in double quotes (a double quote
    inside becomes a single one). Never code: a name is data."""
    return '"' + shown(name, limit).replace('"', "'") + '"'


def pageable_mask(ra, config) -> np.ndarray | None:
    """The steps of a GPU rank whose pageable copies move at least ``pageable_min_bytes_per_step`` (what
    ``pageable-memcpy`` reports; ``host-sync`` links to it): a bool mask, None where no step does."""
    s = ra.steps
    if ra.basis != "gpu" or "pageable_h2d_bytes" not in s:
        return None
    mask = ((s["pageable_h2d_bytes"] + s["pageable_d2h_bytes"]) >= config.pageable_min_bytes_per_step).to_numpy()
    return mask if mask.any() else None


def step_ids(df: pd.DataFrame, mask) -> list[int]:
    return [int(s) for s in df.loc[np.asarray(mask, bool), "step"]]


def mean(x) -> float:
    x = np.asarray(x, float)
    return float(np.nanmean(x)) if len(x) and not np.all(np.isnan(x)) else 0.0


def median(x) -> float | None:
    """The median of the known values (NaN left out); None where none is known."""
    x = np.asarray(x, float)
    x = x[~np.isnan(x)]
    return float(np.median(x)) if len(x) else None


def by_row(g: pd.DataFrame) -> dict[str, dict[str, float]]:
    """A grouped table as evidence: each row's index -> its columns as floats."""
    return {name: {c: float(v[c]) for c in g.columns} for name, v in g.iterrows()}


def _period(section) -> float | None:
    v = section.get("period_us") if isinstance(section, dict) else None
    return _positive(v)


def _positive(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) or v <= 0:
        return None
    return float(v)


def first_window(s: pd.DataFrame) -> np.ndarray:
    """The steps of a rank's first window: those the capture's per-window timings (its metadata) cover."""
    return (s["window"] == s["window"].min()).to_numpy() if "window" in s else np.ones(len(s), bool)


PIN_THREAD = "_pin_memory_loop"  # Python's name of the DataLoader's pinning thread ends in its target's name


def _thread_cpu(ra) -> tuple[dict, np.ndarray] | None:
    """The capture's thread times (``process_threads``) summed by role: ``{"loop", "pin"}`` CPU us over the first
    window's recorded steps (None for a role not seen), and the mask of those steps. None without that record."""
    threads = (ra.metadata or {}).get("process_threads")
    rows = threads.get("threads") if isinstance(threads, dict) else None
    s = ra.steps
    if not isinstance(rows, list) or not len(s):
        return None
    rows = [r for r in rows if isinstance(r, dict) and _positive(r.get("cpu_us")) is not None]
    loop = [r["cpu_us"] for r in rows if r.get("main") is True]
    pin = [r["cpu_us"] for r in rows if PIN_THREAD in str(r.get("name", ""))]
    return {"loop": sum(loop) if loop else None, "pin": sum(pin) if pin else None}, first_window(s)


def pin_thread_us(ra) -> float | None:
    """CPU time of the DataLoader's pinning thread per batch over the first window's recorded steps, where the
    capture measured the process's threads (``process_threads``): its CPU time over the batches those steps drew."""
    got = _thread_cpu(ra)
    if got is None or got[0]["pin"] is None or "dataloader_count" not in ra.steps:
        return None
    cpu, first = got[0]["pin"], got[1]
    batches = float(np.nansum(ra.steps.loc[first, "dataloader_count"].to_numpy(float)))
    return cpu / batches if batches > 0 else None


def loader_bound(ra) -> dict | None:
    """The least time a batch of the rank's DataLoader takes, where the capture measured it, and what sets it:
    ``{"period_us", "limited_by", "workers_us", "pin_thread_us"}``. Two measures, each a floor on how often the
    loader can deliver during training: the workers' busy time per batch over their number (``loader_timing``) and
    the pinning thread's CPU time per batch (``process_threads``: one thread handles every batch, so it delivers no
    faster). None where the trace has neither. The pre-loop probe (``loader_probe``) is not one: with no training
    work it saw a batch every 12.8 ms where training drew one every 6.1 ms (fixtures/gpu_pairs/s2_big_fed)."""
    meta = ra.metadata or {}
    workers, pin = _period(meta.get("loader_timing")), pin_thread_us(ra)
    found = {k: v for k, v in (("workers", workers), ("pinning thread", pin)) if v is not None}
    if not found:
        return None
    limited_by = max(found, key=found.get)
    return {"period_us": found[limited_by], "limited_by": limited_by, "workers_us": workers, "pin_thread_us": pin}


def loader_period_us(ra) -> float | None:
    """The least time a batch of the rank's DataLoader takes, where the capture measured it (``loader_bound``)."""
    b = loader_bound(ra)
    return b["period_us"] if b else None


def thread_cpu_per_step(ra) -> dict | None:
    """Where the capture timed the training process's threads (``process_threads``): CPU time per step of the
    loop's own thread and of the DataLoader's pinning thread over the first window's recorded steps
    (``{"loop_us", "pin_us"}``, a thread not seen is None). None without that record."""
    got = _thread_cpu(ra)
    if got is None:
        return None
    cpu, n = got[0], int(got[1].sum())
    return {k + "_us": (v / n if v is not None and n else None) for k, v in cpu.items()}


def loader_evidence(ra) -> dict:
    """The rank's DataLoader as evidence keys (what ``loader_fix`` reads): the settings the capture recorded
    (``dataloader_settings``, None where it recorded none) and what it timed of the loader (no keys where nothing)."""
    out = {"dataloader_settings": (ra.metadata or {}).get("dataloader")}
    bound = loader_bound(ra)
    if bound is not None:
        out.update({"loader_period_us": bound["period_us"], "loader_limited_by": bound["limited_by"],
                    "workers_us_per_batch": bound["workers_us"], "pin_thread_us_per_batch": bound["pin_thread_us"]})
    return out


def loader_fix(ev, setup=None) -> str:
    """The loader fix for a rank, from its evidence (``dataloader_settings`` and ``loader_evidence``): more workers
    than it has, the settings it lacks, and where its pinning thread (not its workers) set the pace, what that
    thread handles."""
    if not isinstance(ev, dict):  # an evidence record: its fields, an unset one as None
        ev = {k: v for k in ev.__struct_fields__ if (v := getattr(ev, k)) is not msgspec.UNSET}
    settings = ev.get("dataloader_settings") if isinstance(ev.get("dataloader_settings"), dict) else {}
    now = settings.get("num_workers")
    if isinstance(now, int) and not isinstance(now, bool) and now > 0:
        workers = f"num_workers={2 * now},   # now {now}"
    else:
        workers = "num_workers=8,   # ~ CPU cores per GPU" + (" (now 0: batches made in the loop)" if now == 0 else "")
    lines = [f"loader = DataLoader(dataset, batch_size=..., {workers}",
             "                    persistent_workers=True, prefetch_factor=4, pin_memory=True)",
             "# and keep __getitem__ cheap: decode / augment ahead of time or on the GPU"]
    pin, work = ev.get("pin_thread_us_per_batch"), ev.get("workers_us_per_batch")
    if ev.get("loader_limited_by") == "pinning thread" and pin:
        than = f" against {work / 1000:.2f} ms for the workers" if work else ""
        lines.append(f"# its pinning thread set the pace ({pin / 1000:.2f} ms of CPU a batch{than}): one thread of "
                     f"the training process copies every batch byte; send fewer bytes (uint8 from the workers, "
                     f"cast and normalize on the GPU)")
    from .fixes import fit_loader_fix  # fitted to the run's setup: cores, pinning, persistent workers

    return "\n".join(fit_loader_fix(setup, lines, now))


def real_steps(df: pd.DataFrame) -> pd.DataFrame:
    """The steps a rank's means are taken over: real ProfilerSteps, or the synthetic ones when that is all."""
    if "synthetic" in df and len(df) and df["synthetic"].astype(bool).any():
        real = df[~df["synthetic"].astype(bool)]
        return real if len(real) else df
    return df
