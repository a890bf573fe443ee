#!/usr/bin/env bash
# Capture the diff fixtures (fixtures/gpu_diff/: repeats of two unchanged jobs and one-knob regressions of them) and
# the setup fixtures (fixtures/gpu_setup/: fp32/bf16, pageable/pinned, compiled, graph replay, SGD), 12 active steps
# each, one capture after another so that no two share the GPU.
#
# Usage (repository root, a machine with a CUDA GPU):
#   bash scripts/gpu_diff_pairs.sh OUT_DIR [TAR_DIR]
# Environment:
#   ONLY="name ..."   capture only these (default: all, in the order below)
#   DEADLINE_S=560    start a capture only if it ends within this many seconds of the start even when it runs into
#                     its limit (the others are listed as skipped)
#   CAP_TIMEOUT_S=120 the limit of one eager capture; compiled captures get COMPILE_TIMEOUT_S=200
#   ACTIVE=12, EXTRA="--set ..."  recorded steps, and options added to every capture (for a dry run on CPU:
#                     ACTIVE=2 EXTRA="--set batch_size=2 --set seq_len=8 --set d_model=64")
# Each capture's output goes to OUT_DIR/capture-log.txt. With TAR_DIR, after every capture the log and one
# GROUP_FAMILY.tar.gz per group and name prefix (gpu_diff_cpu.tar.gz: gpu_diff/cpu_*) are rewritten there, so a call
# stopped at its limit still returns what was done, in pieces of a few MB.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT_DIR=${1:?usage: gpu_diff_pairs.sh OUT_DIR [TAR_DIR]}
TAR_DIR=${2:-}
DEADLINE_S=${DEADLINE_S:-560}
CAP_TIMEOUT_S=${CAP_TIMEOUT_S:-120}
COMPILE_TIMEOUT_S=${COMPILE_TIMEOUT_S:-200}
PY=${PYTHON:-python3}
mkdir -p "$OUT_DIR"
LOG=$OUT_DIR/capture-log.txt
START=$(date +%s)
CAP="$PY -m traceinspect.cli.capture capture --nproc 1 --overwrite --wait 1 --warmup 2 --active ${ACTIVE:-12}"
# probe_loader=false: no pre-loop loader probe (it costs up to 30 s a capture); every trace says so in its metadata
COMMON="--preset optimized --set probe_loader=false"
# the CPU-bound job: 16 small Linear layers (the host issuing launches is the limit)
CPUJOB="$COMMON --model deep --set deep_layers=16 --set accum_steps=2"
# the GPU-bound job: a 4-layer d_model=1024 transformer encoder, 64 x 256 tokens per step (one micro-batch: the
# trace of 12 steps stays near 1.5 MB)
TF="$COMMON --model transformer --set accum_steps=1"
GPUJOB="$TF --set d_model=1024 --set tf_heads=16 --set seq_len=256 --set batch_size=64"
# the setup group's jobs: a mid-size transformer (launch-bound in bf16) and a small-batch MLP
MIDTF="$TF --set d_model=512 --set tf_heads=8 --set seq_len=128 --set batch_size=32"
SMALL="$COMMON --set batch_size=64 --set num_workers=4"

{
  echo "# gpu_diff_pairs.sh $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) ($(nproc) cores)"
  $PY -c "import torch; print('# torch', torch.__version__, 'cuda', torch.version.cuda, 'device',
torch.cuda.get_device_name() if torch.cuda.is_available() else 'none')" 2>&1
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/# gpu /'
} | tee -a "$LOG"

pack() {  # pack GROUP NAME: rewrite the tarball of NAME's group and prefix, and copy the log
  [ -n "$TAR_DIR" ] || return 0
  local group=$1 family=${2%%_*}
  mkdir -p "$TAR_DIR"
  (cd "$OUT_DIR" && tar -czf "$TAR_DIR/${group}_$family.tar.gz.tmp" "$group"/"$family"_*) &&
    mv "$TAR_DIR/${group}_$family.tar.gz.tmp" "$TAR_DIR/${group}_$family.tar.gz"
  cp "$LOG" "$TAR_DIR/"
}

run() {
  local group=$1 name=$2 limit=$3; shift 3
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return; fi
  local now=$(( $(date +%s) - START ))
  if [ $(( now + limit )) -gt "$DEADLINE_S" ]; then
    echo "-- $name: skipped (t=${now}s, limit ${limit}s, deadline ${DEADLINE_S}s)" | tee -a "$LOG"; return
  fi
  echo "== $group/$name (t=${now}s): $*" | tee -a "$LOG"
  timeout -k 10 "$limit" $CAP --out "$OUT_DIR/$group/$name" "$@" ${EXTRA:-} 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || echo "!! $name failed (exit $rc)" | tee -a "$LOG"
  pack "$group" "$name"
}

T=$CAP_TIMEOUT_S C=$COMPILE_TIMEOUT_S
# diff group: repeats interleaved with the regressions, so that drift of the machine spreads over all of them
run gpu_diff cpu_a          $T $CPUJOB
run gpu_diff gpu_a          $T $GPUJOB
run gpu_diff cpu_single     $T $CPUJOB --set optimizer_impl=single
run gpu_diff gpu_fp32       $T $GPUJOB --set amp=none --set tf32=false
run gpu_diff cpu_b          $T $CPUJOB
run gpu_diff gpu_b          $T $GPUJOB
run gpu_diff cpu_tiny       $T $CPUJOB --set bucket_cap_mb=0.01
run gpu_diff gpu_item       $T $GPUJOB --set sync_loss=true
run gpu_diff gpu_single     $T $GPUJOB --set optimizer_impl=single
run gpu_diff cpu_c          $T $CPUJOB
run gpu_diff gpu_c          $T $GPUJOB
run gpu_diff cpu_item       $T $CPUJOB --set sync_loss=true
# setup group
run gpu_setup tf_bf16       $T $MIDTF
run gpu_setup tf_fp32       $T $MIDTF --set amp=none --set tf32=false
run gpu_setup small_pinned  $T $SMALL
run gpu_setup small_pageable $T $SMALL --set pin_memory=false --set non_blocking=false
run gpu_setup small_sgd     $T $SMALL --set optimizer=sgd --set optimizer_impl=foreach
run gpu_setup small_compiled $C $SMALL --set compile=default
run gpu_setup small_eager   $T $SMALL
run gpu_setup small_graphs  $C $SMALL --set compile=reduce-overhead
run gpu_diff cpu_d          $T $CPUJOB
run gpu_diff gpu_d          $T $GPUJOB
# the GPU-bound job: the same transformer in fp32 (the bf16 one above is still bound by the host), two more
# captures beside gpu_fp32, and its one-knob regression
run gpu_diff gpu_fp32_b     $T $GPUJOB --set amp=none --set tf32=false
run gpu_diff gpu_fp32_c     $T $GPUJOB --set amp=none --set tf32=false
run gpu_diff gpu_fp32_single $T $GPUJOB --set amp=none --set tf32=false --set optimizer_impl=single
# repeats of the small pageable/pinned pair, interleaved: the run-to-run spread of each knob, with the 4 loader
# workers of the setup group and with the 8 of fixtures/gpu_pairs' small family (there 8 active steps, here 12).
# REPEAT_GROUP puts them in another group (another machine's repeats); the _a captures of the 4-worker pair are
# for such a group (gpu_setup has them as small_pinned and small_pageable).
R=${REPEAT_GROUP:-gpu_setup}
run $R small_pinned_a   $T $SMALL
run $R small_pageable_a $T $SMALL --set pin_memory=false --set non_blocking=false
run $R small_pinned_b   $T $SMALL
run $R small_pageable_b $T $SMALL --set pin_memory=false --set non_blocking=false
run $R w8_pinned_a      $T $SMALL --set num_workers=8
run $R w8_pageable_a    $T $SMALL --set num_workers=8 --set pin_memory=false --set non_blocking=false
run $R small_pinned_c   $T $SMALL
run $R small_pageable_c $T $SMALL --set pin_memory=false --set non_blocking=false
run $R w8_pinned_b      $T $SMALL --set num_workers=8
run $R w8_pageable_b    $T $SMALL --set num_workers=8 --set pin_memory=false --set non_blocking=false
echo "# done in $(( $(date +%s) - START ))s" | tee -a "$LOG"
[ -z "$TAR_DIR" ] || cp "$LOG" "$TAR_DIR/"
