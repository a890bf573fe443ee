#!/usr/bin/env bash
# Capture the paired GPU fixtures in fixtures/gpu_pairs/: each problem next to its clean twin, which differs in one
# knob only, with 8 active steps each, so a finding's time at stake can be held against the measured saving.
# Usage: bash scripts/gpu_pairs.sh [OUT_DIR]   (repository root, a machine with a CUDA GPU)
set -uo pipefail
export PYTHONPATH=$PWD
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${1:-fixtures/gpu_pairs}
CAP="python3 -m traceinspect.cli.capture capture --nproc 1 --overwrite --wait 1 --warmup 2 --active 8"
BIG="--set mlp_in=4096 --set mlp_hidden=16384 --set batch_size=1024 --set num_workers=8"
run() {
  local name=$1; shift
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return; fi
  echo "== $name: $*"; $CAP --out "$OUT/$name" "$@" || echo "!! $name failed"
}
# clean twins (each captured twice: the run-to-run noise)
run small_clean    --preset optimized --set num_workers=8
run small_clean_b  --preset optimized --set num_workers=8
run big_clean      --preset optimized $BIG
run big_clean_b    --preset optimized $BIG
run deep_clean     --preset optimized --model deep
# one knob broken each
run small_pageable --preset optimized --set num_workers=8 --set pin_memory=false --set non_blocking=false
run big_pageable   --preset optimized $BIG --set pin_memory=false --set non_blocking=false
run small_item     --preset optimized --set num_workers=8 --set sync_loss=true
run big_item       --preset optimized $BIG --set sync_loss=true
run big_fp32       --preset optimized $BIG --set amp=none --set tf32=false
run small_no_sync_off --preset optimized --set num_workers=8 --set no_sync=false
run deep_unfused   --preset optimized --model deep --set optimizer_impl=foreach
run deep_single    --preset optimized --model deep --set optimizer_impl=single
run deep_tiny      --preset optimized --model deep --set bucket_cap_mb=0.01
# the loader pair: the same slow per-item work, 0 workers against 8
run loader_starved --preset optimized --set item_delay_ms=0.02 --set num_workers=0
run loader_fed     --preset optimized --set item_delay_ms=0.02 --set num_workers=8
# the big loader with more workers (the loader fix of big_clean)
run big_fed        --preset optimized $BIG --set num_workers=14
run big_fp32_fed   --preset optimized $BIG --set num_workers=14 --set amp=none --set tf32=false
# launch overhead: the same step eager (a clean twin from the same session) and compiled
run small_eager    --preset optimized --set num_workers=8
run small_compiled --preset optimized --set num_workers=8 --set compile=default
# second captures of two twins of this group (the run-to-run noise within one session)
run big_clean_2b   --preset optimized $BIG
run small_eager_b  --preset optimized --set num_workers=8
# repeated windows of one process
CAP="python3 -m traceinspect.cli.capture capture --nproc 1 --overwrite --wait 1 --warmup 1 --active 3"
run two_windows    --preset optimized --repeat 2
