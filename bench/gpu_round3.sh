#!/usr/bin/env bash
# The third GPU measurement (docs/gpu-results.md, "Round 3"): what round 2 could not, as one call that
# writes as it goes. Run from the project root on an offline GPU host, the wheel kit in .whl/
# (docs/gpu-results.md says how to make it); results go under $OUT (log.txt, smi.csv, apps.csv,
# gpucheck.md, startup.txt, w.tar.gz), packed every 20 s so a call cut at its limit keeps what it measured.
#   A. `python3 -m orchestrator.cli gpu-check` as README says, alone on the card: its wall time and table.
#      The 3B model is built on the CPU meanwhile (4 threads), as part B needs it.
#   B. after A, together until END_AT: the 16 GiB frontier past round 2 (random 3B, K=8 B=2, budget
#      16 GiB, TRL at TRL_LENGTHS and Unsloth at UNSLOTH_LENGTHS, one probe step each, started cold),
#      and bench/bench_startup.py on Unsloth (the first trial compiles; are later ones, cold or forked,
#      spared it?).
# CPU rehearsal: SKIP_INSTALL=1 MODEL15=tiny MODEL3B=tiny TRL_LENGTHS=16 UNSLOTH_LENGTHS=16 END_AT=200 bash bench/gpu_round3.sh
set -u
START=$(date +%s)
el() { echo $(($(date +%s) - START)); }
END_AT=${END_AT:-555}       # seconds after start by which everything has ended and been packed
MODEL15=${MODEL15:-random:Qwen/Qwen2.5-1.5B-Instruct}
MODEL3B=${MODEL3B:-random:Qwen/Qwen2.5-3B-Instruct}
TRL_LENGTHS=${TRL_LENGTHS:-"1024 2048"}
UNSLOTH_LENGTHS=${UNSLOTH_LENGTHS:-"2048"}
OUT=${OUT:-/tmp/out-local}
W=${W:-/tmp/w}
PY=${PY:-python3}
mkdir -p "$OUT" "$W"
exec > >(tee -a "$OUT/log.txt") 2>&1

pack() {
    cp -f "$W/gpu-check/results.md" "$OUT/gpucheck.md" 2>/dev/null
    cp -f "$W/smi.csv" "$OUT/smi.csv" 2>/dev/null
    cp -f "$W/apps.csv" "$OUT/apps.csv" 2>/dev/null
    cp -f "$W/startup.txt" "$OUT/startup.txt" 2>/dev/null
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

(OMP_NUM_THREADS=4 timeout 240 $PY -c "from trainers.models import resolve_model; print(resolve_model('$MODEL3B'))" \
    >"$W/build3b.log" 2>&1; echo "[$(el)] 3B build done: $(tail -1 "$W/build3b.log")") &
BUILD=$!

# A. gpu-check alone on the card.
t0=$(el)
timeout 330 $PY -m orchestrator.cli gpu-check --output-dir "$W/gpu-check"
rc=$? # before any $(...) below, which would reset it
echo "[$(el)] gpu-check exit $rc wall $(($(el) - t0)) s"
pack

# B. the frontier and Unsloth's start-up, together.
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
echo "[$(el)] frontier ($left s): trl $TRL_LENGTHS, unsloth $UNSLOTH_LENGTHS; unsloth start-up bench"
pids=()
for L in $TRL_LENGTHS; do
    trial "trl-L$L" trl "$L" "$left" &
    pids+=($!)
done
for L in $UNSLOTH_LENGTHS; do
    trial "unsloth-L$L" unsloth "$L" "$left" &
    pids+=($!)
done
(timeout "$left" $PY bench/bench_startup.py --framework unsloth --model "$MODEL15" --rounds 1 --steps 2 \
    >"$W/startup.txt" 2>&1; echo "[$(el)] startup bench exit $?") &
pids+=($!)
wait "${pids[@]}"
kill "${BG[@]}" 2>/dev/null
echo "[$(el)] done"
