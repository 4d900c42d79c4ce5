#!/usr/bin/env bash
# The third GPU measurement (docs/gpu-results.md, "Round 3"): what round 2 could not, as one call that
# writes as it goes. Run from the project root on an offline GPU host, the wheel kit in .whl/
# (docs/gpu-results.md says how to make it); results go under $OUT (log.txt, smi.csv, apps.csv,
# gpucheck.md, startup.txt, w.tar.gz), packed every 20 s so a call cut at its limit keeps what it measured.
#   A. `python3 -m orchestrator.cli gpu-check` as README says, alone on the card: its wall time and table.
#      The 3B model is built on the CPU meanwhile (4 threads), as part B needs it.
#   B. after A, together until END_AT: the 16 GiB frontier past round 2 (random 3B, K=8 B=2, budget
#      16 GiB, TRL at TRL_LENGTHS and Unsloth at UNSLOTH_LENGTHS, one probe step each, started cold),
#      and bench/cost/startup.py on Unsloth (the first trial compiles; are later ones, cold or forked,
#      spared it?).
# CPU rehearsal: SKIP_INSTALL=1 MODEL15=tiny MODEL3B=tiny TRL_LENGTHS=16 UNSLOTH_LENGTHS=16 END_AT=200 bash bench/gpu/round3.sh
set -u
END_AT=${END_AT:-555}       # seconds after start by which everything has ended and been packed
MODEL15=${MODEL15:-random:Qwen/Qwen2.5-1.5B-Instruct}
TRL_LENGTHS=${TRL_LENGTHS:-"1024 2048"}
UNSLOTH_LENGTHS=${UNSLOTH_LENGTHS:-"2048"}
source "$(dirname "$0")/kit.sh"

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
(timeout "$left" $PY -m bench startup --set stack=unsloth --set model="$MODEL15" --set rounds=1 --set steps=2 \
    >"$W/startup.txt" 2>&1; echo "[$(el)] startup bench exit $?") &
pids+=($!)
wait "${pids[@]}"
kill "${BG[@]}" 2>/dev/null
echo "[$(el)] done"
