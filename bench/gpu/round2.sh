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
# CPU rehearsal: SKIP_INSTALL=1 MODEL15=tiny MODEL3B=tiny TRL_LENGTHS=16 UNSLOTH_LENGTHS=16 bash bench/gpu/round2.sh
set -u
END_AT=${END_AT:-265}       # seconds after start by which everything has ended and been packed
TRL_LENGTHS=${TRL_LENGTHS:-"256 512 1024"}
UNSLOTH_LENGTHS=${UNSLOTH_LENGTHS:-"512 1024"}
source "$(dirname "$0")/kit.sh"

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
