"""No DDP-only advice on runs of another strategy: on every real CPU capture of fixtures/cpu_strategies (FSDP2,
tensor parallel, pipeline parallel), no finding's title, evidence or fix names DDP's API, the DDP-only rules
declare so, and the setup record's parallelism is the strategy recogniser's."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

import pytest

from traceinspect.config import Config
from traceinspect.diagnose import all_rules
from traceinspect.run.api import analyze_path
from analyses import doc_of

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "cpu_strategies"
FOLDERS = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
DDP_API = re.compile(r"bucket_cap_mb|no_sync|DistributedDataParallel|gradient_as_bucket_view|buckets_per_round")


@lru_cache(maxsize=None)
def _doc(name: str) -> dict:
    return doc_of(FIXTURES / name)


def test_every_strategy_folder_is_checked():
    assert {"fsdp2_2", "fsdp2_4", "tp_2", "pp_1f1b"} <= set(FOLDERS)


@pytest.mark.slow  # a sweep over every trace at hand
@pytest.mark.parametrize("name", FOLDERS)
def test_no_ddp_advice(name):
    doc = _doc(name)
    assert "ddp" not in doc["strategy"]["kinds"], doc["strategy"]
    for f in doc["findings"]:
        text = f["title"] + "\n" + json.dumps(f["evidence"]) + "\n" + (f["fix"] or "")
        assert not DDP_API.search(text), (name, f["id"], DDP_API.search(text).group(0))


@pytest.mark.slow  # a sweep over every trace at hand
@pytest.mark.parametrize("name", FOLDERS)
def test_setup_parallelism_is_the_strategy(name):
    doc = _doc(name)
    for r in doc["ranks"]:
        assert r["setup"]["parallelism"] == "+".join(doc["strategy"]["kinds"]), (name, r["rank"])


def test_ddp_only_rules_declare_it():
    by_id = {r.id: r for r in all_rules()}
    for rid in ("small-buckets", "sync-every-microstep"):
        assert by_id[rid].strategies == ("ddp",)
        assert not by_id[rid].applies_to(("fsdp2",)) and by_id[rid].applies_to(("ddp",))


def test_an_allreduce_job_without_ddp_gets_no_ddp_advice(allreduce_job_run):
    """A real gloo capture of a loop that all-reduces tensors with torch.distributed directly (tests/allreduce_job.py:
    no DistributedDataParallel, no autograd): every all-reduce of a step once read as DDP's gradient buckets, so
    exposed-comm advised DistributedDataParallel(bucket_cap_mb=...). The trace's CPU ops show none of DDP's marks:
    no strategy is named, and no finding names DDP's API or its buckets."""
    doc = analyze_path(allreduce_job_run, Config(use_cache=False, workers=1)).to_dict()
    assert doc["strategy"]["kinds"] == [] and all(r["setup"]["parallelism"] is None for r in doc["ranks"])
    assert any(f["id"] == "exposed-comm" for f in doc["findings"])  # its communication is still reported
    for f in doc["findings"]:
        text = f["title"] + "\n" + json.dumps(f["evidence"]) + "\n" + (f["fix"] or "")
        assert not DDP_API.search(text), (f["id"], DDP_API.search(text).group(0))
