#!/usr/bin/env bash
# The second GPU measurement (docs/gpu-results.md, "Round 2"), as one call that writes as it goes.
# Run from the project root on an offline GPU host, the wheel kit in .whl/ (docs/gpu-results.md says how
# to make it); results go under $OUT (at most 8 files: log.txt, smi.csv, apps.csv, w.tar.gz, gpucheck.md).
#   A. `python3 -m orchestrator.cli gpu-check` as README says, alone on the card: its wall time and table.
#   B. one wave, all at once (memory is per process): the 16 GiB frontier (3B, K=8 B=2, completion
#      LENGTHS, both stacks, one probe step each), plus gpu-check's TRL and Unsloth trials again with
#      those neighbours (packing: the same configuration alone in A and packed here; and the second
#      Unsloth trial of the same shapes, with the compile caches of A's).
#   C. during B, once B's start-ups are over: bench/bench_startup.py on the 1.5B model (cold against forked).
# CPU rehearsal: SKIP_INSTALL=1 GPU_CHECK=0 MODEL15=tiny MODEL3B=tiny LENGTHS="16 32" bash bench/gpu_round2.sh
set -u
START=$(date +%s)
el() { echo $(($(date +%s) - START)); }
END_AT=${END_AT:-560}       # seconds after start by which everything has ended and been packed
MODEL15=${MODEL15:-random:Qwen/Qwen2.5-1.5B-Instruct}
MODEL3B=${MODEL3B:-random:Qwen/Qwen2.5-3B-Instruct}
LENGTHS=${LENGTHS:-"512 1024 2048"}
QUANT=${QUANT:-nf4}
OUT=${OUT:-/tmp/out-local}
W=${W:-/tmp/w}
PY=${PY:-python3}
mkdir -p "$OUT" "$W"
exec > >(tee -a "$OUT/log.txt") 2>&1

pack() {
    echo "[$(el)] packing"
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

nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu,utilization.memory,power.draw --format=csv -l 1 \
    >"$W/smi.csv" 2>/dev/null &
BG=($!)
(while sleep 5; do
    nvidia-smi --query-compute-apps=timestamp,pid,process_name,used_memory --format=csv,noheader 2>/dev/null
done >"$W/apps.csv") &
BG+=($!)
(nice -n 19 timeout 300 $PY -c "from trainers.models import resolve_model; print(resolve_model('$MODEL3B'))" \
    >"$W/build3b.log" 2>&1; echo "[$(el)] 3B build done: $(tail -1 "$W/build3b.log")") &
BUILD=$!

# A. gpu-check, alone on the card (the 3B build runs beside it at nice 19: CPU only).
if [[ ${GPU_CHECK:-1} == 1 ]]; then
    t0=$(el)
    timeout 330 $PY -m orchestrator.cli gpu-check --output-dir "$W/gpu-check" --timeout 300
    rc=$?  # before any $(...) below, which would reset it
    echo "[$(el)] gpu-check exit $rc wall $(($(el) - t0)) s"
    pack
fi
wait $BUILD

trial() {  # trial NAME FRAMEWORK MODEL K B LENGTH STEPS PROBE BUDGET_GIB TIMEOUT [MORE OPTIONS...]
    timeout "${10}" $PY -m orchestrator.cli trial --framework "$2" --mode grpo --model-name "$3" \
        --num-generations "$4" --batch-size "$5" --max-completion-length "$6" --max-steps "$7" \
        --probe-steps "$8" ${9:+--memory-budget-gib $9} --quantization "$QUANT" --timeout-s "$((${10} - 10))" \
        "${@:11}" --output-dir "$W/b/$1" >"$W/b-$1.log" 2>&1
    local rc=$?
    echo "[$(el)] $1 exit $rc: $(grep -E '^(completed|oom|failed|unavailable|timeout)' "$W/b-$1.log" | tail -1)"
}

# B. the frontier (workstation-16gb's settings: prompt 256, r16/alpha 32/dropout 0.05, lr 2e-4,
# num_iterations 2) and the packed copies of A's trials (gpu-check's spec: trial's defaults, K4 B2, 5 steps).
left=$((END_AT - $(el) - 15))
echo "[$(el)] wave B ($left s): frontier $LENGTHS x trl,unsloth; packed trl, unsloth"
FRONTIER=(--lora-r 16 --lora-alpha 32 --lora-dropout 0.05 --learning-rate 2e-4 --num-iterations 2)
pids=()
for L in $LENGTHS; do
    for fw in trl unsloth; do
        trial "$fw-L$L" "$fw" "$MODEL3B" 8 2 "$L" 1 1 16 "$left" "${FRONTIER[@]}" &
        pids+=($!)
    done
done
trial packed-trl trl "$MODEL15" 4 2 128 5 0 "" "$left" &
pids+=($!)
trial packed-unsloth unsloth "$MODEL15" 4 2 128 5 0 "" "$left" &
pids+=($!)
# C. start-up, cold against forked trainers (bench/bench_startup.py on the 1.5B model, about 90 s), once
# wave B's own start-ups are over: there is no time for it on an idle card after B. Its cold/forked
# ratio is measured within one run, under B's load.
(sleep "${STARTUP_AFTER:-100}"
    timeout $((END_AT - $(el) - 10)) $PY bench/bench_startup.py --model "$MODEL15" --rounds 1 --steps 1 \
        >"$W/startup.log" 2>&1
    rc=$?
    echo "[$(el)] startup exit $rc"
    tail -8 "$W/startup.log") &
pids+=($!)
wait "${pids[@]}"
pack

kill "${BG[@]}" 2>/dev/null
echo "[$(el)] done"
