#!/usr/bin/env bash
# Run a list of fedrun jobs on the lent GPU machine, spread over its GPU and its CPU cores (track=none:
# the GPU image has no MLflow; each job's final table lands in OUT/logs/<name>.log).
#
#   bash scripts/checks/device_grid.sh JOBS OUT
# JOBS: one job per line, "name|device|overrides" (device cuda or cpu); blank lines and # comments skipped.
# GRID_GPU_SLOTS (default 4) jobs share the GPU at once; GRID_CPU_SLOTS (default 6) CPU jobs run with
# GRID_CPU_THREADS (default 2) threads each; GRID_JOB_S (default 540) caps every job's wall time.
# OUT/summary.txt: one line per job (name, exit status, device, seconds).
set -uo pipefail
cd "$(dirname "$0")/../.."
JOBS=$1; OUT=$2
mkdir -p "$OUT/logs"
PYTHON=${GRID_PYTHON:-python3}  # GRID_PYTHON=.venv/bin/python tries a job list here (data from FEDRUN_DATA_DIR)
if [ -z "${GRID_PYTHON:-}" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/fedrun-site .gpu/wheels/*.whl || exit 2
    export PYTHONPATH=/tmp/fedrun-site:$PWD FEDRUN_DATA_DIR=$PWD/.gpu/datasets
fi
export PYTHONUNBUFFERED=1 PYTHON

run_job() {  # name device overrides...
    local name=$1 device=$2; shift 2
    local threads=1; [ "$device" = cpu ] && threads=${GRID_CPU_THREADS:-2}
    local start=$SECONDS
    timeout "${GRID_JOB_S:-540}" "$PYTHON" -m fedrun.cli "$@" track=none sim.progress=false sim.device="$device" \
        sim.threads="$threads" > "$OUT/logs/$name.log" 2>&1
    echo "$name rc=$? ${device} $((SECONDS - start))s" | tee -a "$OUT/summary.txt"
}
export -f run_job
export OUT

queue() {  # device slots
    grep -v '^\s*#' "$JOBS" | grep -v '^\s*$' | awk -F'|' -v d="$1" '$2 == d' | while IFS='|' read -r name device overrides; do
        printf '%s\0%s\0%s\0' "$name" "$device" "$overrides"
    done | xargs -0 -r -n 3 -P "$2" bash -c 'run_job "$0" "$1" $2'
}
queue cuda "${GRID_GPU_SLOTS:-4}" &
queue cpu "${GRID_CPU_SLOTS:-6}" &
wait
