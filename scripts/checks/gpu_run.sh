#!/usr/bin/env bash
# fedrun's GPU checks (issue #7) on a machine with its own CUDA build of torch and no network.
#
#   here:   make gpu-bundle                 (.gpu/: wheels the GPU image lacks + the benchmark datasets)
#   there:  bash scripts/checks/gpu_run.sh [OUT]   (in the repository root, .gpu/ beside it)
#
# Steps, each logged to OUT (default outputs/gpu):
#   1. scripts/bench/bench.py --device cuda: W0-W11 on the GPU; then --device cpu on the same host (GPU/CPU ratio)
#   2. scripts/checks/device_check.py: every case trained on the CPU and on CUDA from the same seeds; exact
#      cases must agree to float tolerance (synthetic data, then ml-100k)
#   3. the unit tests with sim.device=auto, i.e. on CUDA (MLflow-backed tests and integration tests left out:
#      MLflow is not on the GPU image)
# Set GPU_RUN_QUICK=1 for a smoke run (tiny benchmark, 2 rounds): it checks this script, not the GPU.
# A short lease runs a part: GPU_RUN_WORKLOADS (benchmark workloads, default all), GPU_RUN_CPU_WORKLOADS
# (the same host's CPU baseline, default the same), GPU_RUN_ML100K=0 (skip that device check),
# GPU_RUN_TESTS (pytest paths, default tests/), GPU_RUN_STEP_S (a time limit per step, seconds);
# GPU_RUN_BENCH_ARGS (more bench.py arguments); GPU_RUN_CPU_WORKLOADS=none skips the CPU baseline. GPU_RUN_ANCHOR_S=<seconds> also trains the converged
# LightGCN anchor on gowalla (scripts/investigations/lightgcn_anchor.py) in the background while the checks run: the
# benchmarks run first, alone, so their timings are clean; the checks' timings then share the GPU with it.
# GPU_RUN_ANCHOR_ARGS passes it more arguments ("--eval-every 20", "dataset=ml-100k" for a smoke run).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-outputs/gpu}
DEVICE=${GPU_RUN_DEVICE:-cuda}
mkdir -p "$OUT"
[ -d .gpu/wheels ] || { echo "no .gpu/ here: run 'make gpu-bundle' on a machine with a network first" >&2; exit 2; }
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/fedrun-site .gpu/wheels/*.whl \
    || exit 2
export PYTHONPATH=/tmp/fedrun-site:$PWD FEDRUN_DATA_DIR=$PWD/.gpu/datasets PYTHONUNBUFFERED=1
python3 - <<PY || exit 2
import torch
device = torch.device("$DEVICE")
assert device.type != "cuda" or torch.cuda.is_available(), "torch sees no CUDA device here"
print("torch", torch.__version__, "CUDA", torch.version.cuda, torch.cuda.get_device_name() if device.type == "cuda" else "cpu")
PY

ROUNDS=5; BENCH=(); if [ "${GPU_RUN_QUICK:-0}" = 1 ]; then ROUNDS=2; BENCH=(--tiny --rounds 2 --loop-rounds 1); fi
BENCH+=(${GPU_RUN_BENCH_ARGS:-})  # e.g. "--rounds 5 --loop-rounds 1" for a short lease
WORKLOADS=${GPU_RUN_WORKLOADS:-w0,w1,w2,w3,w4,w5,w6,w7,w8,w9,w10}
CPU_WORKLOADS=${GPU_RUN_CPU_WORKLOADS:-$WORKLOADS}
LIMIT=(); [ -n "${GPU_RUN_STEP_S:-}" ] && LIMIT=(timeout "$GPU_RUN_STEP_S")
status=0
step() { local name=$1; shift; echo "== $name: $*"; "${LIMIT[@]}" "$@" > >(tee "$OUT/$name.log") 2>&1 || { echo "!! $name failed"; status=1; }; }
step bench-gpu python3 scripts/bench/bench.py --device "$DEVICE" --workloads "$WORKLOADS" "${BENCH[@]}" --out "$OUT/bench-$DEVICE"
[ "$CPU_WORKLOADS" != none ] && step bench-cpu python3 scripts/bench/bench.py --device cpu --workloads "$CPU_WORKLOADS" \
    "${BENCH[@]}" --out "$OUT/bench-cpu"
anchor=
if [ -n "${GPU_RUN_ANCHOR_S:-}" ]; then
    echo "== lightgcn-anchor (background, ${GPU_RUN_ANCHOR_S} s)"
    timeout $((GPU_RUN_ANCHOR_S + 120)) python3 scripts/investigations/lightgcn_anchor.py --device "$DEVICE" \
        --budget-s "$GPU_RUN_ANCHOR_S" --out "$OUT/lightgcn-anchor" ${GPU_RUN_ANCHOR_ARGS:-} \
        > "$OUT/lightgcn-anchor.log" 2>&1 &
    anchor=$!
fi
step device-check-synthetic python3 scripts/checks/device_check.py --device "$DEVICE" --rounds $ROUNDS --out "$OUT/synthetic"
[ "${GPU_RUN_ML100K:-1}" = 1 ] && step device-check-ml100k python3 scripts/checks/device_check.py --device "$DEVICE" \
    --rounds $ROUNDS --data ml-100k --out "$OUT/ml-100k"
step tests python3 -m pytest -q -x -p no:cacheprovider -m "not integration" --ignore=tests/integration \
    --ignore=tests/test_run.py --ignore=tests/test_checkpoint.py ${GPU_RUN_TESTS:-tests}
if [ -n "$anchor" ]; then
    wait "$anchor" || { echo "!! lightgcn-anchor failed"; status=1; }
    tail -n 3 "$OUT/lightgcn-anchor.log"
fi
exit $status
