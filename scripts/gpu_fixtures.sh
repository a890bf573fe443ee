#!/usr/bin/env bash
# Capture the GPU fixtures in fixtures/gpu/ with the project's own capture command (one GPU, NCCL).
# Usage: bash scripts/gpu_fixtures.sh [OUT_DIR]   (run from the repository root on a machine with a CUDA GPU)
set -uo pipefail
export PYTHONPATH=$PWD
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${1:-fixtures/gpu}
NPROC=${NPROC:-1}
CAP="python3 -m traceinspect.cli.capture capture --nproc $NPROC --overwrite"
# ONLY="a b" runs just those fixtures.
run() {
  local name=$1; shift
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return; fi
  echo "== $name: $*"; $CAP --out "$OUT/$name" "$@" || echo "!! $name failed"
}

run baseline        --preset baseline
run optimized       --preset optimized
run pinned          --preset baseline --set pin_memory=true --set non_blocking=true
run slow_loader     --preset optimized --set num_workers=0 --set item_delay_ms=2
run loss_item_sync  --preset optimized --set sync_loss=true
run bf16_scaler     --preset optimized --set grad_scaler=on
run fp32            --preset optimized --set amp=none --set tf32=false
run single_adamw    --preset optimized --model deep --set optimizer_impl=single --set zero_grad_set_to_none=false
run deep_tiny       --preset optimized --model deep --set bucket_cap_mb=0.01
run deep_default    --preset optimized --model deep --set bucket_cap_mb=25
run no_sync_off     --preset optimized --set no_sync=false
run tf_shapes       --preset optimized --model transformer --set d_model=260 --record-shapes
run fp16            --preset optimized --set amp=fp16
run tf32            --preset optimized --set amp=none --set tf32=true

# A model large enough to keep an H200 busy: the before/after pair where the fixes show in the GPU timeline.
BIG="--set mlp_in=4096 --set mlp_hidden=16384 --set batch_size=1024"
run big_baseline    --preset baseline  $BIG
run big_optimized   --preset optimized $BIG --set num_workers=8
