"""Precision of the matrix work (traceinspect/precision.py) on real traces, checked against the raw JSON.

- Kernel names: a table of REAL kernel names (where each was seen is noted; the expected precision is the one the
  launching op's recorded ``Input type`` and the run's math mode confirm), classified by name alone.
- Public traces (../shared, skipped when absent): per-step precision times recomputed here in plain Python from
  the raw events, the op join checked against an independent join, the GEMM shapes against ``Input Dims``.
- GPU fixtures (fixtures/, captured on an H200 with traceinspect.capture.workload; skipped until they exist): fp32 vs
  bf16 runs, picked by the capture metadata each trace carries.
- CPU captures (gloo): no kernels, so empty tables and zero columns, and no crash.
"""

from __future__ import annotations

import bisect
import json
import re
from pathlib import Path

import pytest

from traceinspect.run.stages import analyze
from traceinspect.config import Config
from traceinspect.load.reader import load
from traceinspect.analyze.precision import classify_kernel, gemm_shape, op_dtype

from gpu_fixtures import gpu_fixture, raw_json, report
from public_traces import BERT, DDP_2RANK, DIFF_CONTROL, DIFF_TEST, need, only_file, raw_events

NOCACHE = Config(use_cache=False, workers=1)


# --------------------------------------------------------------------------------------------------------------
# Kernel names

NAMES = [
    # (name, family, precision, where seen)
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "gemm", "bf16", "H200 aten::mm BFloat16"),
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT", "gemm", "bf16", "H200 aten::addmm autocast bf16"),
    ("nvjet_tst_32x64_64x16_4x1_v_bz_TNN", "gemm", "bf16", "public SGLang H100 profile, aten::mm BFloat16"),
    ("nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_NTT", "gemm", "fp16", "H200 aten::mm Half"),
    ("nvjet_sm90_qqtst_128x128_128x6_2x1_v_bz_coopA_algo2_TNT", "gemm", "fp8", "H200 aten::_scaled_mm e4m3"),
    ("nvjet_sm90_qqsss_128x128_128x6_2x1_v_bz_coopA_algo2_TNT", "gemm", "fp8", "H200 aten::_scaled_mm -> fp32"),
    ("nvjet_sss_tf32_128x256_TNT", "gemm", "tf32", "public write-up, fp32 LM head with TF32"),
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel"
     "__5x_cublas", "gemm", "tf32", "H200 allow_tf32=True"),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_"
     "kernel__5x_cublas", "gemm", "fp32", "H200 allow_tf32=False"),
    ("sm80_xmma_gemm_cf32cf32_f32f32_cf32_nt_n_tilesize32x32x8_stage3_warpsize2x2x1_ffma_aligna8_alignc8_execute_"
     "kernel__5x_cublas", "gemm", "fp32", "H200 convolution_backward fp32 (FFT)"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(cutlass_80_simt_sgemm_256x128_8x4_nn_"
     "align1::Params)", "gemm", "fp32", "H200 aten::mm float"),
    ("ampere_sgemm_128x128_tn", "gemm", "fp32", "hta_diff_control A100"),
    ("volta_sgemm_128x32_nt", "gemm", "fp32", "hta_diff_test V100"),
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 2, 2, false, false, cublasGemvParams<"
     "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, "
     "cublasGemvTensorStridedBatched<float>, float> >(...)", "gemm", "fp32", "hta_diff_control A100"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
     "__5x_cublas", "gemm", "bf16", "tracelens H100"),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>(cutlass_80_wmma_"
     "tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8::Params)", "gemm", "bf16", "tracelens H100"),
    ("void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_nn_align1>(cutlass_75_tensorop_bf16_"
     "s1688gemm_bf16_128x128_nn_align1::Params)", "gemm", "bf16", "H200 aten::mm 1000x1001x999 bf16"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_f16_s16816gemm_f16_128x256_64x3_nn_align2>(cutlass_80_tensorop_"
     "f16_s16816gemm_f16_128x256_64x3_nn_align2::Params)", "gemm", "fp16", "H200 aten::mm fp16 misaligned"),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>(cutlass_80_tensorop_s1688gemm_"
     "256x64_16x4_nn_align4::Params)", "gemm", "tf32", "hta_diff_control A100 aten::mm float"),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_i161616gemm_s8_forwardCompat_128x128_32x2_nn_align4>(...)",
     "gemm", "int8", "H200 aten::_int_mm"),
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize256x64x32_warpgroupsize1x1x1_g1_"
     "execute_segment_k_off_kernel__5x_cudnn", "conv", "bf16", "H200 cudnn_convolution bf16"),
    ("sm90_xmma_dgrad_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize256x64x32_warpgroupsize1x1x1_g1_"
     "execute_segment_k_off_kernel__5x_cudnn", "conv", "fp16", "H200 convolution_backward fp16"),
    ("sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x64x32_stage5_warpsize2x2x1_g1_"
     "tensor16x8x8_execute_kernel__5x_cudnn", "conv", "tf32", "H200 cudnn.allow_tf32=True"),
    ("sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize128x32x8_stage3_warpsize2x2x1_g1_ffma_"
     "aligna4_alignc4_execute_kernel__5x_cudnn", "conv", "fp32", "H200 cudnn.allow_tf32=False"),
    ("void cutlass__5x_cudnn::Kernel<cutlass_tensorop_s1688dgrad_optimized_tf32_256x64_16x4_nhwc_unity_stride_"
     "align4>(...)", "conv", "tf32", "H200 convolution_backward TF32"),
    ("_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblock22ImplicitGemm"
     "MultistageINS_4gemm9GemmShapeILi128ELi128ELi32EEENS4_52Conv2dWgradOutputGradientTileAccessIteratorOptimized"
     "INS_11MatrixShapeILi128ELi32EEENS_10tfloat32_tENS_9transform", "conv", "tf32", "hta_ddp_2rank A100"),
    ("cudnn_infer_ampere_scudnn_128x64_relu_xregs_large_nn_v1", "conv", "fp32", "hta_ddp_2rank A100"),
    ("void cudnn::winograd_nonfused::winogradWgradData4x4<float, float>(cudnn::winograd_nonfused::"
     "WinogradDataParams<float, float>)", "conv", "fp32", "H200 convolution_backward fp32"),
    ("void fft2d_r2c_32x32<float, false, 0u, false>(float2*, float const*, int, int, int, int, int, int, int, int,"
     " int, cudnn::reduced_divisor, bool, int2, int, int)", "conv", "fp32", "H200 convolution_backward fp32"),
    ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
     "cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false>"
     "(pytorch_flash::Flash_fwd_params)", "attention", "bf16", "tracelens H100"),
    ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64, 128, 128, 8, "
     "4, 4, 4, false, false, cutlass::half_t, Flash_kernel_traits<64, 128, 128, 8, cutlass::half_t> >, true>(...)",
     "attention", "fp16", "H200 _flash_attention_backward fp16"),
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, "
     "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)", "attention", "bf16", "H200 efficient SDPA"),
    ("fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm80,"
     " true, 64, 64, 64, true, true>::Params)", "attention", "fp32", "H200 SDPA fp32 (3xTF32)"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0",
     "attention", "16bit", "H200 _cudnn_attention_forward, bf16 AND fp16 inputs"),
]

NOT_MATRIX = [
    "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, true, true, false>(...)",
    "void splitKreduce_kernel<float, float, float, float, true, false, false>(cublasSplitKParams<float>, ...)",
    "void epilogue::impl::globalKernel<float, float, float, true, true>(int, int, long, float*, ...)",
    "void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float, false, true, "
    "(cudnnKernelDataType_t)0>(...)",
    "void cudnn::cnn::reduce_wgrad_nchw_helper<float, float>(void*, void const*, float, int, int)",
    "void cask_cudnn_infer::computeOffsetsKernel<false, false>(cask_cudnn_infer::ComputeOffsetsParams)",
    "void pytorch_flash::flash_bwd_convert_dq_kernel<Flash_bwd_kernel_traits<64, 128, 128, 8, 4, 4, 4, false, "
    "false, cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 8, cutlass::bfloat16_t> > >(...)",
    "void pytorch_flash::flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<64, 128, 128, 8, 4, 4, 4>>(...)",
    "void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*, unsigned int, unsigned int)",
    "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>(...)",
    "void fbgemm_gpu::permute_indices_weights_kernel<false, int, decltype(nullptr)>(int, int, int, int const*)",
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
]


@pytest.mark.parametrize("name,family,precision,seen", NAMES, ids=[n[3] + ":" + n[0][:30] for n in NAMES])
def test_real_kernel_names_classify(name, family, precision, seen):
    assert classify_kernel(name) == (family, precision), seen


@pytest.mark.parametrize("name", NOT_MATRIX, ids=lambda n: n[:40])
def test_helpers_are_not_matrix_work(name):
    assert classify_kernel(name) is None


def test_input_types_and_shapes_parse():
    """Strings exactly as the profiler writes them (from the public H100 and A100 traces)."""
    assert op_dtype('["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"]') == "bf16"
    assert op_dtype('["float", "float"]') == "fp32"
    assert op_dtype('["c10::Float8_e4m3fn", "c10::Float8_e4m3fn", "float", "float", "", ""]') == "fp8"
    assert op_dtype('["TensorList", "Scalar"]') is None
    assert gemm_shape("aten::addmm", "[[30522], [141, 512], [512, 30522], [], []]") == (1, 141, 30522, 512)
    assert gemm_shape("aten::mm", "[[4090, 256], [256, 1020]]") == (1, 4090, 1020, 256)
    assert gemm_shape("aten::bmm", "[[16, 512, 64], [16, 64, 512]]") == (16, 512, 512, 64)
    assert gemm_shape("aten::linear", "[[8, 256, 1024], [4096, 1024], [4096]]") == (1, 2048, 4096, 1024)


# --------------------------------------------------------------------------------------------------------------
# Public traces, against the raw JSON


def raw_step_kernels(raw: dict) -> list[tuple[int, dict]]:
    """(ProfilerStep number, kernel event) for every kernel whose launching runtime call ran inside a step."""
    ev = raw["traceEvents"]
    steps = sorted((e for e in ev if e.get("cat") == "user_annotation" and re.fullmatch(r"ProfilerStep#\d+", e["name"])),
                   key=lambda e: e["ts"])
    launch = {}
    for e in ev:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            for s in steps:
                if s["ts"] <= e["ts"] < s["ts"] + s["dur"]:
                    launch[e["args"]["correlation"]] = int(s["name"].split("#")[1])
    return [(launch[k["args"]["correlation"]], k) for k in ev
            if k.get("cat") == "kernel" and k.get("args", {}).get("correlation") in launch]


def per_step(pairs, pred) -> dict[int, float]:
    out: dict[int, float] = {}
    for step, k in pairs:
        if pred(k["name"]):
            out[step] = out.get(step, 0.0) + k["dur"]
    return out


def test_a100_tf32_and_fp32_split_matches_raw():
    """hta_diff_control: TF32 CUTLASS GEMMs (``tensorop_s1688gemm``) plus cuBLAS FFMA sgemm / gemv kernels."""
    need(DIFF_CONTROL)
    pairs = raw_step_kernels(raw_json(only_file(DIFF_CONTROL)))
    tf32 = per_step(pairs, lambda n: "tensorop_s1688gemm" in n)
    fp32 = per_step(pairs, lambda n: n.startswith("ampere_sgemm") or "gemv2" in n or "gemvx" in n or "gemmk1" in n)
    ra = report(DIFF_CONTROL).ranks[0]
    s = ra.steps.set_index("step")
    assert set(tf32) == set(s.index)
    for step in s.index:
        assert s.at[step, "matmul_tf32_us"] == pytest.approx(tf32[step], abs=1e-6)
        assert s.at[step, "matmul_fp32_us"] == pytest.approx(fp32[step], abs=1e-6)
        assert s.at[step, "matmul_16bit_us"] == 0
    # The 16-bit-free A100 run is mostly TF32: the fp32 rule has nothing to say about it.
    assert s["matmul_fp32_us"].sum() / s["compute_kernel_time_us"].sum() < 0.2
    assert "no-mixed-precision" not in {f.id for f in report(DIFF_CONTROL).findings}


def test_op_join_matches_an_independent_time_join():
    """Older Kineto (hta_diff_control) wrote the correlation into External id, so ops are found by time: the
    innermost cpu_op on the launching thread that encloses the launching runtime call."""
    need(DIFF_CONTROL)
    raw = raw_json(only_file(DIFF_CONTROL))
    ev = raw["traceEvents"]
    rt = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    ops_by_tid: dict = {}
    for e in ev:
        if e.get("cat") == "cpu_op":
            ops_by_tid.setdefault(e["tid"], []).append(e)
    for ops in ops_by_tid.values():
        ops.sort(key=lambda o: (o["ts"], -o["dur"]))
    starts = {t: [o["ts"] for o in ops] for t, ops in ops_by_tid.items()}
    expected: dict[str, set] = {}
    for k in ev:
        if k.get("cat") == "kernel" and ("sgemm" in k["name"] or "s1688gemm" in k["name"]):
            r = rt[k["args"]["correlation"]]
            ops = ops_by_tid[r["tid"]]
            i = bisect.bisect_right(starts[r["tid"]], r["ts"]) - 1
            while ops[i]["ts"] + ops[i]["dur"] < r["ts"]:  # the latest-starting op that still encloses the call
                i -= 1
            expected.setdefault(k["name"], set()).add(ops[i]["name"])
    kt = report(DIFF_CONTROL).ranks[0].tables["matmul_kernels"].set_index("name")
    for name, ops in expected.items():
        assert kt.at[name, "op"] in ops
        assert kt.at[name, "op_dtype"] == "fp32"  # float inputs: the name decides fp32 vs TF32
        assert kt.at[name, "source"] == "name+op"


def test_h100_bf16_inference_all_matrix_work_is_bf16():
    need(BERT)
    raw = raw_json(only_file(BERT))
    pairs = raw_step_kernels(raw)
    mm = per_step(pairs, lambda n: "gemm" in n or "flash_fwd" in n)
    ra = report(BERT).ranks[0]
    s = ra.steps.iloc[0]
    assert s["matmul_us"] == pytest.approx(mm[int(s["step"])], abs=1e-6)
    assert s["matmul_bf16_us"] == pytest.approx(s["matmul_us"])
    assert s["matmul_fp32_us"] == s["matmul_tf32_us"] == 0
    # Every kernel's op, joined here by External id, recorded bf16 inputs: the name is confirmed.
    ops = {e["args"]["External id"]: e for e in raw["traceEvents"] if e.get("cat") == "cpu_op"}
    kt = ra.tables["matmul_kernels"]
    assert set(kt["source"]) == {"name+op"}
    for k in raw["traceEvents"]:
        if k.get("cat") == "kernel" and k["name"] in set(kt["name"]):
            op = ops[k["args"]["External id"]]
            assert "c10::BFloat16" in op["args"]["Input type"][:3]
            assert kt.set_index("name").at[k["name"], "op"] == op["name"]


def test_h100_gemm_shapes_match_input_dims():
    need(BERT)
    raw = raw_json(only_file(BERT))
    dims = {}
    ops = {e["args"]["External id"]: e for e in raw["traceEvents"] if e.get("cat") == "cpu_op"}
    for k in raw["traceEvents"]:
        if k.get("cat") == "kernel" and "gemm" in k["name"]:
            op = ops[k["args"]["External id"]]
            assert op["name"] == "aten::addmm"
            _, (m, kk), (_, n) = op["args"]["Input Dims"][:3]
            dims[(m, n, kk)] = dims.get((m, n, kk), 0.0) + k["dur"]
    shapes = report(BERT).ranks[0].tables["gemm_shapes"]
    got = {(r.m, r.n, r.k): r.total_us for r in shapes.itertuples()}
    assert got == pytest.approx(dims)
    assert not shapes["aligned8"].any()  # sequence length 141


def test_v100_fp32_and_cc_gate():
    need(DIFF_TEST)
    rep = report(DIFF_TEST)
    ra = rep.ranks[0]
    assert ra.compute_capability == (7, 0)
    s = ra.steps
    assert s["matmul_fp32_us"].sum() == pytest.approx(s["matmul_us"].sum() - s["matmul_unknown_us"].sum())
    # fp32 GEMMs are over a quarter of kernel time (above the 20 % threshold), yet V100 has no bf16/TF32 tensor
    # cores: no finding.
    assert (s["matmul_fp32_us"] / s["compute_kernel_time_us"]).min() > 0.25
    assert "no-mixed-precision" not in {f.id for f in rep.findings}


def test_a100_convolutions_are_tf32():
    """hta_ddp_2rank: cuDNN/CUTLASS TF32 convolutions and GEMMs, a few small FFMA ones."""
    need(DDP_2RANK)
    ra = report(DDP_2RANK).ranks[0]
    m = ra.tables["matmul"]
    by = m.groupby(["family", "precision"])["total_us"].sum()
    assert by[("conv", "tf32")] > 10 * by.get(("conv", "fp32"), 0.0)
    assert by[("gemm", "tf32")] > 0
    pairs = raw_step_kernels(raw_json(only_file(DDP_2RANK)))
    tf32 = per_step(pairs, lambda n: "tf32" in n or "tfloat32" in n or "s1688gemm" in n)
    s = ra.steps.set_index("step")
    for step, us in tf32.items():
        assert s.at[step, "matmul_tf32_us"] == pytest.approx(us, abs=1e-6)


# --------------------------------------------------------------------------------------------------------------
# GPU fixtures (H200)


def test_fixture_fp32_run_is_fp32():
    folder = gpu_fixture(amp="none", tf32=False)
    for ra in report(folder).ranks:
        s = ra.steps
        assert s["matmul_fp32_us"].sum() > 0.9 * s["matmul_us"].sum()
        assert s["matmul_16bit_us"].sum() == 0


def test_fixture_bf16_run_is_bf16():
    folder = gpu_fixture(amp="bf16")
    for ra in report(folder).ranks:
        s = ra.steps
        assert s["matmul_bf16_us"].sum() > 0.5 * s["matmul_us"].sum()
        assert s["matmul_fp16_us"].sum() == 0


def test_fixture_amp_ops_match_raw():
    folder = gpu_fixture(amp="bf16", grad_scaler="on")
    for ra in report(folder).ranks:
        updates = steps = 0
        for f in ra.files:
            ev = raw_events(Path(f))["traceEvents"]
            updates += sum(1 for e in ev if e.get("cat") == "cpu_op" and e["name"] == "aten::_amp_update_scale_")
            steps += sum(1 for e in ev if e.get("cat") == "user_annotation"
                         and re.fullmatch(r"ProfilerStep#\d+", e["name"]))
        amp = ra.tables["amp_ops"]
        assert amp.loc[amp["name"] == "aten::_amp_update_scale_", "count"].sum() == updates == steps


# --------------------------------------------------------------------------------------------------------------
# CPU traces


def test_cpu_trace_has_no_matrix_kernels(cpu_clean_run):
    rep = analyze(load(cpu_clean_run, NOCACHE), NOCACHE)
    assert not rep.errors
    for ra in rep.ranks:
        assert ra.basis == "cpu"
        assert len(ra.tables["matmul"]) == 0 and len(ra.tables["gemm_shapes"]) == 0
        assert (ra.steps["matmul_us"] == 0).all() and (ra.steps["matmul_count"] == 0).all()
        assert json.dumps(rep.to_dict())  # the new columns serialise
