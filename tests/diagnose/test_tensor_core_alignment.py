"""tensor-core-alignment on real traces: the H100 bf16 BERT (sequence length 141, vocabulary 30522) and the H200 bf16
transformer fixture fire, with shapes and narrow-kernel time read from the raw JSON; padded shapes (CONSTRUCTED) and
runs without 16-bit GEMMs are quiet."""

from __future__ import annotations

from pathlib import Path

import pytest

from _real import finding, rerun
from gpu_fixtures import gpu_fixture, raw_json, report
from public_traces import BERT, DDP_2RANK, DIFF_CONTROL, need, only_file, raw_events


def test_alignment_fires_on_bert():
    """H100 bf16 BERT: sequence length 141 in every GEMM, vocabulary 30522 in the output projection, whose
    kernel is an ``align2`` one (the rest found ``align8`` kernels)."""
    need(BERT)
    f = finding(report(BERT), "tensor-core-alignment")
    # The rule fires; its claim (tens of us on a 4.4 ms step) is below the warning line (docs/findings.md).
    assert f is not None and f.severity == "info" and f.time_at_stake_us <= f.extra["estimate_us"]
    assert "below the warning line" in f.extra["severity_reason"]
    r = f.evidence["per_rank"][0]
    assert r["misaligned_share"] == pytest.approx(1.0)
    shapes = {(s["m"], s["n"], s["k"]): s for s in r["shapes"]}
    vocab = shapes[(141, 30522, 512)]
    assert "align2" in vocab["kernel"]
    raw = raw_json(only_file(BERT))["traceEvents"]
    align2 = sum(e["dur"] for e in raw if e.get("cat") == "kernel" and "gemm" in e["name"] and "_align2" in e["name"])
    assert r["narrow_kernel_us_per_step"] == pytest.approx(align2)
    assert f.extra["estimate_us"] == pytest.approx(0.5 * align2)


def test_alignment_fires_on_transformer_fixture():
    """H200 bf16 transformer captured with record_shapes and widths not multiple of 8: the shapes in the
    evidence are the ones the ops recorded (``Input Dims`` of the addmm / mm ops, read here from the raw JSON)."""
    folder = gpu_fixture(model="transformer", amp="bf16", record_shapes=True)
    rep = report(folder)
    f = finding(rep, "tensor-core-alignment")
    assert f is not None
    recorded = set()
    for p in rep.ranks[0].files:
        for e in raw_events(Path(p))["traceEvents"]:
            if e.get("cat") == "cpu_op" and e["name"] in ("aten::addmm", "aten::mm") \
                    and "c10::BFloat16" in (e["args"].get("Input type") or []):
                d = [x for x in e["args"]["Input Dims"] if len(x) == 2]
                a, b = d[-2], d[-1]
                recorded.add((a[0], b[1], a[1]))
    for r in f.evidence["per_rank"]:
        for sh in r["shapes"]:
            assert (sh["m"], sh["n"], sh["k"]) in recorded
            assert sh["m"] % 8 or sh["n"] % 8 or sh["k"] % 8


def test_alignment_quiet_when_shapes_are_multiples_of_8():
    """CONSTRUCTED: the same BERT analysis with its GEMM table's M padded to 144: nothing left to flag."""
    need(BERT)

    def pad(ra):
        g = ra.tables["gemm_shapes"]
        g["m"] = 144
        g["n"] = (g["n"] + 7) // 8 * 8
        g["aligned8"] = True

    assert finding(rerun(report(BERT), pad), "tensor-core-alignment") is None


@pytest.mark.parametrize("folder", [DIFF_CONTROL, DDP_2RANK], ids=lambda p: p.name)
def test_alignment_quiet_without_16bit_gemms(folder):
    """A100 TF32 GEMMs with shapes (not 16-bit), and a trace without record_shapes."""
    need(folder)
    assert finding(report(folder), "tensor-core-alignment") is None
