# shellcheck shell=bash
# What every GPU round's script shares (bench/gpu/round2.sh, bench/gpu/round3.sh source it): the clock,
# the log, packing $W's results into $OUT (every 20 s and at exit), the wheel kit's install, nvidia-smi's
# monitors (their PIDs in BG), trial(), one probe step of the 16 GiB frontier (random 3B, K=8 B=2), and
# sweep(), a sweep through `rlsweep run` as users run it (Ray Tune; the kit made with RAY=1 holds Ray).
# Rounds from now on measure through sweep(); trial() stays for what a sweep cannot say.
# OUT, W, PY, MODEL3B and SKIP_INSTALL may be set before; each has a default.
START=$(date +%s)
el() { echo $(($(date +%s) - START)); }
MODEL3B=${MODEL3B:-random:Qwen/Qwen2.5-3B-Instruct}
OUT=${OUT:-/tmp/out-local}
W=${W:-/tmp/w}
PY=${PY:-python3}
mkdir -p "$OUT" "$W"
exec > >(tee -a "$OUT/log.txt") 2>&1

pack() {  # what exists of each round's results
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
$PY -c "import ray; print('ray', ray.__version__)" 2>/dev/null ||
    echo "no Ray: sweep() (rlsweep run) needs the kit made with RAY=1 bash tools/wheelhouse.sh"
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

trial() {  # trial NAME STACK LENGTH TIMEOUT
    RLSWEEP_COLD_START=1 timeout "$4" $PY -m orchestrator.cli trial --stack "$2" --mode grpo \
        --model "$MODEL3B" --num-generations 8 --batch-size 2 --max-completion-length "$3" \
        --max-steps 1 --probe-steps 1 --memory-budget-gib 16 --quantization nf4 --lora-r 16 --lora-alpha 32 \
        --lora-dropout 0.05 --learning-rate 2e-4 --num-iterations 2 --timeout-s "$(($4 - 5))" \
        --output-dir "$W/b/$1" >"$W/b-$1.log" 2>&1
    local rc=$?
    echo "[$(el)] $1 exit $rc: $(grep -E '^(completed|oom|failed|unavailable|timeout)' "$W/b-$1.log" | tail -1)"
}

sweep() {  # sweep NAME SWEEP_YAML TIMEOUT [--set KEY=VALUE ...]: `rlsweep run` into $W/s/NAME, MLflow off
    local name=$1 file=$2 limit=$3
    shift 3
    timeout "$limit" $PY -m orchestrator.cli run "$file" --set tracking.enabled=false "$@" \
        --output-dir "$W/s/$name" >"$W/s-$name.log" 2>&1
    local rc=$?
    echo "[$(el)] sweep $name exit $rc: $(grep -v '^\s*$' "$W/s-$name.log" | tail -1)"
}
