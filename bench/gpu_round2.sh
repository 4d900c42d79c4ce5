#!/usr/bin/env bash
# The second GPU measurement (docs/gpu-results.md, "Round 2"), as one call that writes as it goes.
# Run from the project root on an offline GPU host, the wheel kit in .whl/ (docs/gpu-results.md says how
# to make it); results go under $OUT (log.txt, smi.csv, apps.csv, gpucheck.md, w.tar.gz), packed every
# 20 s so a call cut at its limit still returns what it measured.
# Sized for about 4.5 minutes of command time, so two parts share the card from the start:
#   A. `python3 -m orchestrator.cli gpu-check` as README says: its wall time and table. Its trials run
#      beside B's (so its speed is the packed figure and its wall time an upper bound for an idle card),
#      and its TRL trial is the check that a trainer forked from the fork server runs on CUDA.
#   B. the 16 GiB frontier: random 3B, K=8 B=2, workstation-16gb's settings, completion LENGTHS, both
#      stacks, one probe step each, all at once (memory is per process), started cold
#      (RLSWEEP_COLD_START=1) once the 3B model is built.
# CPU rehearsal: SKIP_INSTALL=1 MODEL15=tiny MODEL3B=tiny TRL_LENGTHS=16 UNSLOTH_LENGTHS=16 bash bench/gpu_round2.sh
set -u
START=$(date +%s)
el() { echo $(($(date +%s) - START)); }
END_AT=${END_AT:-265}       # seconds after start by which everything has ended and been packed
MODEL3B=${MODEL3B:-random:Qwen/Qwen2.5-3B-Instruct}
TRL_LENGTHS=${TRL_LENGTHS:-"256 512 1024"}
UNSLOTH_LENGTHS=${UNSLOTH_LENGTHS:-"512 1024"}
OUT=${OUT:-/tmp/out-local}
W=${W:-/tmp/w}
PY=${PY:-python3}
mkdir -p "$OUT" "$W"
exec > >(tee -a "$OUT/log.txt") 2>&1

pack() {
    cp -f "$W/gpu-check/results.md" "$OUT/gpucheck.md" 2>/dev/null
    cp -f "$W/smi.csv" "$OUT/smi.csv" 2>/dev/null
    cp -f "$W/apps.csv" "$OUT/apps.csv" 2>/dev/null
    tar -C "$W" --exclude='*.safetensors' --exclude=cache --exclude='unsloth_compiled_cache' \
        -czf "$OUT/w.tar.gz.part" . 2>/dev/null && mv -f "$OUT/w.tar.gz.part" "$OUT/w.tar.gz"
}
trap pack EXIT

echo "[$(el)] start on $(hostname)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
if [[ ${SKIP_INSTALL:-0} != 1 ]]; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 |
        grep -v 'is ignored' | tail -3
    export PYTHONPATH=/tmp/site:$PWD
fi
# No dist-info stub: the source checkout runs as it is (--version reads pyproject.toml).
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 \
    UNSLOTH_DISABLE_STATISTICS=1 RLSWEEP_CACHE=$W/cache PYTHONUNBUFFERED=1
$PY -m orchestrator.cli --version
echo "[$(el)] installed"

BG=()
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu,utilization.memory,power.draw --format=csv -l 1 \
    >"$W/smi.csv" 2>/dev/null &
BG+=($!)
(while sleep 5; do
    nvidia-smi --query-compute-apps=timestamp,pid,process_name,used_memory --format=csv,noheader 2>/dev/null
done >"$W/apps.csv") &
BG+=($!)
(while sleep 20; do pack; done) &
BG+=($!)

(timeout 200 $PY -c "from trainers.models import resolve_model; print(resolve_model('$MODEL3B'))" \
    >"$W/build3b.log" 2>&1; echo "[$(el)] 3B build done: $(tail -1 "$W/build3b.log")") &
BUILD=$!

# A. gpu-check from the start.
(t0=$(el)
    timeout $((END_AT - 10)) $PY -m orchestrator.cli gpu-check --output-dir "$W/gpu-check" --timeout $((END_AT - 20))
    rc=$? # before any $(...) below, which would reset it
    echo "[$(el)] gpu-check exit $rc wall $(($(el) - t0)) s") &
CHECK=$!

# B. the frontier, once the 3B model is built.
wait $BUILD
trial() {  # trial NAME FRAMEWORK LENGTH TIMEOUT
    RLSWEEP_COLD_START=1 timeout "$4" $PY -m orchestrator.cli trial --framework "$2" --mode grpo \
        --model-name "$MODEL3B" --num-generations 8 --batch-size 2 --max-completion-length "$3" \
        --max-steps 1 --probe-steps 1 --memory-budget-gib 16 --quantization nf4 --lora-r 16 --lora-alpha 32 \
        --lora-dropout 0.05 --learning-rate 2e-4 --num-iterations 2 --timeout-s "$(($4 - 5))" \
        --output-dir "$W/b/$1" >"$W/b-$1.log" 2>&1
    local rc=$?
    echo "[$(el)] $1 exit $rc: $(grep -E '^(completed|oom|failed|unavailable|timeout)' "$W/b-$1.log" | tail -1)"
}
left=$((END_AT - $(el) - 8))
echo "[$(el)] frontier ($left s): trl $TRL_LENGTHS, unsloth $UNSLOTH_LENGTHS"
pids=()
for L in $TRL_LENGTHS; do
    trial "trl-L$L" trl "$L" "$left" &
    pids+=($!)
done
for L in $UNSLOTH_LENGTHS; do
    trial "unsloth-L$L" unsloth "$L" "$left" &
    pids+=($!)
done
wait "${pids[@]}" $CHECK
kill "${BG[@]}" 2>/dev/null
echo "[$(el)] done"
