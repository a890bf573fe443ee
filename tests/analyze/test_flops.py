"""Model FLOPs, batch, throughput and MFU against independent computations.

Small CPU models are captured here (in this process, ``record_shapes=True``) at two batch sizes, and one optimizer
step of the same model is counted by ``torch.utils.flop_counter.FlopCounterMode``; the FLOPs the trace's shapes give
per step must match it within 5 %. torch's counter has no formula for the CPU attention op
(``_scaled_dot_product_flash_attention_for_cpu``): it is given torch's own sdpa formulas for it. The public BERT
trace (H100, recorded shapes) gives an MFU; the same rank on a device the peak table lacks gives null.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import pytest

from traceinspect.analyze.flops import op_cost
from traceinspect.analyze.peaks import PEAKS, device_peak, peaks_markdown
from traceinspect.analyze.rank import analyze_rank
from traceinspect.analyze.throughput import job_throughput, rank_throughput
from traceinspect.load.reader import load

from public_traces import BERT, need

ROOT = Path(__file__).resolve().parents[2]
VOCAB, D, HEADS, SEQ = 128, 32, 4, 16


def _models():
    import torch
    import torch.nn.functional as F
    from torch import nn

    class LM(nn.Module):
        """Token ids -> embedding, causal attention, an MLP, a strided 1-d convolution, logits."""

        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(VOCAB, D)
            self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
            self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)
            self.conv = nn.Conv1d(D, D, 3, stride=2, padding=1)
            self.head = nn.Linear(D, VOCAB)

        def forward(self, tok):
            x = self.emb(tok)
            b, s, d = x.shape
            q, k, v = self.qkv(x).view(b, s, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
            x = x + self.fc2(F.gelu(self.fc1(x)))
            x = self.conv(x.transpose(1, 2)).transpose(1, 2)
            return self.head(x)

    def conv_net():
        return nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(8, 16, 3, padding=1),
                             nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))

    return LM, conv_net


def _train_step(model, opt, batches, kind):
    import torch.nn.functional as F

    for x, y in batches:
        out = model(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1)) / len(batches)
        loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def _batches(kind: str, batch: int, accum: int):
    import torch

    g = torch.Generator().manual_seed(batch)
    if kind == "lm":
        return [(torch.randint(0, VOCAB, (batch, SEQ), generator=g), torch.randint(0, VOCAB, (batch, SEQ // 2),
                                                                                    generator=g))
                for _ in range(accum)]
    return [(torch.randn(batch, 3, 16, 16, generator=g), torch.randint(0, 10, (batch,), generator=g))
            for _ in range(accum)]


def _counter_flops(model, opt, batches, kind) -> int:
    """FlopCounterMode's count of one optimizer step (with torch's sdpa formulas for the CPU attention op)."""
    import torch
    from torch.utils import flop_counter as fc

    aten = torch.ops.aten
    def forward(q, k, v, *args, out_shape=None, **kwargs):
        return fc.sdpa_flop_count(q, k, v)

    def backward(grad_out, q, k, v, *args, out_shape=None, **kwargs):
        return fc.sdpa_backward_flop_count(grad_out, q, k, v)

    mapping = {aten._scaled_dot_product_flash_attention_for_cpu: forward,
               aten._scaled_dot_product_flash_attention_for_cpu_backward: backward}
    counter = fc.FlopCounterMode(display=False, custom_mapping=mapping)
    with counter:
        _train_step(model, opt, batches, kind)
    return counter.get_total_flops()


@functools.lru_cache(maxsize=None)
def _capture(kind: str, batch: int, accum: int, shapes: bool, metadata: bool, out: str):
    """Capture 2 active steps of the model into ``out``; return (folder, the counter's FLOPs per step)."""
    torch = pytest.importorskip("torch", reason="torch is needed to capture traces")
    import traceinspect.capture as capture

    torch.manual_seed(0)
    LM, conv_net = _models()
    model = LM() if kind == "lm" else conv_net()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    batches = _batches(kind, batch, accum)
    expected = _counter_flops(model, opt, batches, kind)
    meta = dict(batch_size=batch, accumulation_steps=accum) if metadata else {}
    with capture.profile(out, wait=1, warmup=1, active=2, record_shapes=shapes, gzip=False, verbose=False,
                         **meta) as prof:
        for _ in range(4):
            _train_step(model, opt, batches, kind)
            prof.step()
    return Path(out), expected


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    def get(kind, batch, accum, shapes=True, metadata=True):
        out = tmp_path_factory.mktemp(f"{kind}_{batch}x{accum}_{int(shapes)}{int(metadata)}")
        return _capture(kind, batch, accum, shapes, metadata, str(out))

    return get


def _rank(folder: Path):
    trace = load(folder)
    assert len(trace.ranks) == 1
    return analyze_rank(trace.ranks[0])


@pytest.mark.capture  # the models captured in process (``captured``)
@pytest.mark.parametrize("kind,batch,accum", [("lm", 4, 2), ("lm", 8, 1), ("conv", 4, 2), ("conv", 16, 1)])
def test_model_flops_match_torch_flop_counter(captured, kind, batch, accum):
    folder, expected = captured(kind, batch, accum)
    ra = _rank(folder)
    assert not ra.errors
    flops = ra.steps["model_flops"].to_numpy(float)
    assert len(flops) >= 1 and expected > 0
    for f in flops:
        assert abs(f - expected) <= 0.05 * expected, (f, expected)
    assert (ra.steps["flop_ops_unknown"] == 0).all()
    t = rank_throughput(ra)
    assert t.model_flops_per_step == pytest.approx(expected, rel=0.05)
    step_s = ra.steps["wall_us"].mean() / 1e6
    assert t.achieved_tflops == pytest.approx(expected / step_s / 1e12, rel=1e-6)
    assert t.samples_per_step == batch * accum and t.batch_source == "capture metadata: batch_size"
    assert t.samples_per_s == pytest.approx(batch * accum / step_s, rel=1e-6)
    # CPU: no device peak, no GPU time; null with the reason, never zero
    assert t.mfu is None and "no GPU" in t.reasons["mfu"]
    assert t.gpu_hours_per_million_samples is None and t.reasons["gpu_hours_per_million_samples"]


@pytest.mark.capture  # the models captured in process (``captured``)
def test_causal_attention_is_counted_whole_and_its_skipped_half_reported(captured):
    folder, _ = captured("lm", 4, 2)
    ra = _rank(folder)
    ops = ra.tables["flop_ops"]
    attn = ops[ops["op"].str.contains("attention")]
    assert len(attn) == 2 and attn["causal"].all()
    # b=4, h=4, s=16, d=8: forward 2 x (2 b h s s d), backward 2 b h s s (3 d + 2 d); two micro-batches a step
    b, h, s, d = 4, HEADS, SEQ, D // HEADS
    per_micro = 2 * 2 * b * h * s * s * d + 2 * b * h * s * s * 5 * d
    skipped = ra.steps["causal_skipped_flops"].tolist()  # every recorded step (a loaded machine may record fewer)
    assert skipped and skipped == [per_micro * 2 / 2] * len(skipped)


@pytest.mark.capture  # the models captured in process (``captured``)
def test_batch_and_tokens_from_shapes_without_metadata(captured):
    folder, _ = captured("lm", 8, 2, metadata=False)
    ra = _rank(folder)
    n = len(ra.steps)  # every recorded step (a loaded machine may record fewer)
    assert n and ra.steps["input_batch"].tolist() == [8.0] * n
    assert ra.steps["input_tokens"].tolist() == [8.0 * SEQ] * n
    assert ra.steps["forward_passes"].tolist() == [2.0] * n
    t = rank_throughput(ra)
    assert t.batch == 8 and t.batch_source.startswith("recorded shapes")
    assert t.accum_steps == 2 and t.accum_source == "backward passes counted in the step"
    assert t.samples_per_step == 16 and t.tokens_per_step == 16 * SEQ
    assert t.tokens_per_s == pytest.approx(t.samples_per_s * SEQ)


@pytest.mark.capture  # the models captured in process (``captured``)
def test_image_model_has_no_tokens(captured):
    folder, _ = captured("conv", 4, 2, metadata=False)
    t = rank_throughput(_rank(folder))
    assert t.batch == 4 and t.samples_per_step == 8
    assert t.tokens_per_step is None and t.tokens_per_s is None and "token ids" in t.reasons["tokens_per_s"]


@pytest.mark.capture  # the models captured in process (``captured``)
def test_without_shapes_the_flops_are_null_with_the_reason(captured):
    folder, _ = captured("lm", 4, 1, shapes=False, metadata=False)
    ra = _rank(folder)
    assert ra.steps["model_flops"].isna().all()
    t = rank_throughput(ra)
    for k in ("model_flops_per_step", "achieved_tflops", "mfu"):
        assert getattr(t, k) is None and "record_shapes was off" in t.reasons[k]
    assert t.batch is None and "record_shapes was off" in t.reasons["batch"]
    assert t.samples_per_s is None and t.reasons["samples_per_s"]


def test_bert_h100_mfu_and_an_unknown_device():
    ra = _rank(need(BERT))
    t = rank_throughput(ra)
    assert ra.device == "NVIDIA H100 80GB HBM3" and t.peak_device == "H100 SXM" and t.precision == "bf16"
    assert t.peak_tflops == 989.5
    # FLOPs from the recorded shapes, by hand: 26 addmm (M = 141 tokens) and 4 flash attention calls
    assert t.model_flops_per_step == pytest.approx(8_192_059_392)
    assert t.mfu == pytest.approx(t.achieved_tflops / 989.5) and 0 < t.mfu < 1
    assert t.batch == 1 and t.tokens_per_step == 141
    assert t.roofline and all(r.attainable_tflops and r.attainable_tflops <= 989.5 for r in t.roofline)
    assert [r.lost_us for r in t.roofline] == sorted((r.lost_us for r in t.roofline), reverse=True)
    other = rank_throughput(dataclasses.replace(ra, device="Mystery Accelerator 9000"))
    assert other.mfu is None and other.peak_tflops is None and "not in the peak table" in other.reasons["mfu"]
    assert other.achieved_tflops == t.achieved_tflops  # what does not need the device stays
    assert all(r.attainable_tflops is None for r in other.roofline)


def test_job_adds_data_parallel_ranks_and_refuses_shared_samples():
    from traceinspect.analyze.throughput import Throughput

    r = Throughput(samples_per_s=100.0, tokens_per_s=None, model_flops_per_step=1e12, achieved_tflops=10.0, mfu=0.1,
                   gpu_hours_per_million_samples=2.0, reasons={"tokens_per_s": "no tokens"})
    j = job_throughput([r, r], world_size=4, kinds=("ddp",))
    assert j.samples_per_s == 400 and j.achieved_tflops == 40 and j.mfu == 0.1
    assert j.gpu_hours_per_million_samples == 2.0 and j.tokens_per_s is None and j.reasons["tokens_per_s"]
    tp = job_throughput([r, r], world_size=2, kinds=("tp",))
    assert tp.samples_per_s is None and "share their samples" in tp.reasons["samples_per_s"]
    assert tp.achieved_tflops == 20


@pytest.mark.parametrize("name,row", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200 SXM"), ("NVIDIA B200", "B200 (HGX)"), ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
    ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"), ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
    ("A100-PG509-200", "A100 40GB"), ("Tesla V100-SXM2-16GB", "V100 SXM2"), ("Tesla V100-PCIE-32GB", "V100 PCIe"),
    ("AMD Instinct MI250X", "MI250X"), ("AMD Instinct MI250", "MI250"), ("AMD Instinct MI300X VF", "MI300X"),
    ("AMD Radeon Graphics", None), ("NVIDIA GeForce RTX 4090", None), (None, None),
])
def test_device_names_find_their_peak_row(name, row):
    p = device_peak(name)
    assert (p.device if p else None) == row


def test_peak_table_is_documented_and_dense():
    assert peaks_markdown() in (ROOT / "docs" / "metrics.md").read_text()
    for _, p in PEAKS:
        assert p.source
        # dense tensor-core bf16/fp16 is 2x TF32 where both exist (the datasheets' ratio; no sparsity doubling)
        if p.tf32 and p.bf16:
            assert p.bf16 == pytest.approx(2 * p.tf32, rel=0.01)
    assert device_peak("Tesla V100-SXM2-16GB").tflops("bf16") is None


def test_formulas_by_hand():
    # mm: 2 M N K
    assert op_cost("aten::mm", "[[64, 32], [32, 128]]", '["float", "float"]', None).flops == 2 * 64 * 128 * 32
    # linear on a 3-d input: the leading dimensions are rows
    assert op_cost("aten::linear", "[[4, 16, 32], [96, 32], [96]]", None, None).flops == 2 * 64 * 96 * 32
    # matmul broadcasts batch dimensions
    assert op_cost("aten::matmul", "[[2, 1, 8, 4], [3, 4, 5]]", None, None).flops == 2 * 6 * 8 * 5 * 4
    # conv2d stride 2 pad 1, 3x3: out 8x8 from 16x16 -> 2 N Cout Cin 3*3 8*8
    conv = op_cost("aten::convolution", "[[2, 3, 16, 16], [8, 3, 3, 3], [8], [], [], [], [], [], []]",
                   '["float", "float", "float"]', '["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"]')
    assert conv.flops == 2 * 2 * 8 * 3 * 9 * 64
    # the backward of a first layer (no input gradient): the weight gradient only
    bwd = op_cost("aten::convolution_backward",
                  "[[2, 8, 8, 8], [2, 3, 16, 16], [8, 3, 3, 3], [], [], [], [], [], [], [], []]", None,
                  '["", "", "", "[8]", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", "[False, True, True]"]')
    assert bwd.flops == conv.flops
    # no Concrete Inputs (older torch): the output size is not known, so neither are the FLOPs
    assert op_cost("aten::convolution", "[[2, 3, 16, 16], [8, 3, 3, 3], [8]]", None, None) is None
    # flash attention's own op is [batch, seq, heads, dim]
    fa = op_cost("aten::_flash_attention_forward", "[[1, 141, 8, 64], [1, 141, 8, 64], [1, 141, 8, 64]]", None,
                 '["", "", "", "", "", "141", "141", "0.", "True"]')
    assert fa.flops == 2 * 2 * 8 * 141 * 141 * 64 and fa.causal
