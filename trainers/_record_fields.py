"""The record's table, behind trainers/record.py: every field of a step row and of a trial row, each
declared once with its type, unit, who measures it and what it means, and the words those columns use.

Import it from trainers.record, which re-exports it and derives the rest from it (the names as
attributes, TRL's names, the peak precedence, the figures built from step rows). Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

# Types, as Parquet stores them.
STRING, INT64, FLOAT64, BOOL, TIMESTAMP = "string", "int64", "float64", "bool", "timestamp[ms, UTC]"
TYPES = (STRING, INT64, FLOAT64, BOOL, TIMESTAMP)

# Who measures or sets a field.
SPEC = "trial spec"  # the trial's settings (trainers/trial.py)
TRAINER = "trainer"  # the trainer child's events (trainers/measure.py)
SAMPLER = "sampler"  # the supervisor's memory sampler over the step's wall times (orchestrator/running/telemetry.py)
SUPERVISOR = "supervisor"  # the trial's supervisor (orchestrator/running/supervisor.py)
RECORDER = (
    "recorder"  # computed from the trial's step rows when its row is built (orchestrator/recording/sinks.py)
)
MEMORY_MODEL = "memory model"  # orchestrator/judging/memory, before the trial ran
VERDICT = "verdict"  # orchestrator/judging/verdict.py, from the step rows
SEARCH = "frontier search"  # orchestrator/judging/frontier.py, before the trial would have run
MEASURERS = (SPEC, TRAINER, SAMPLER, SUPERVISOR, RECORDER, MEMORY_MODEL, VERDICT, SEARCH)

# Units: what a number counts; a word for a field that is not a number.
GIB_UNIT = "GiB"  # 2^30 bytes
SECONDS = "s"
EPOCH_S = "s since the epoch"
TOKENS = "tokens"
COUNT = "count"
FRACTION = "fraction"
KEY, TEXT, JSON_TEXT, FLAG, CHOICE, TIME = "key", "text", "JSON", "flag", "one of a set", "UTC time"


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    unit: str
    measured_by: str
    meaning: str


# A step row's per-reward curve, one field per reward the tasks define (tasks/rewards.py REWARD_NAMES):
# the template's {reward} is filled in by step_fields.
REWARD_CURVE = Field(
    "rewards/{reward}/mean", FLOAT64, FRACTION, TRAINER,
    "each reward component's mean over the step's completions (TRL's `rewards/<name>/mean`); null when the "
    "task does not use that reward. `format` is 0/1 for exactly `<think>…</think><answer>…</answer>`; "
    "`format_partial` gives 0.5 per well-formed tag pair",
)  # fmt: skip

# One row per optimizer step of one trial (steps/stack=<f>/mode=<m>/<trial_key>.parquet).
STEP_FIELDS: tuple[Field, ...] = (
    Field("trial_key", STRING, KEY, SPEC, "the trial's key (trials.parquet)"),
    Field("step", INT64, COUNT, TRAINER, "optimizer step, 1-based"),
    Field("probe", BOOL, FLAG, TRAINER, "the completions this step trained on were forced to max_completion_length "
       "(worst-case memory): the first `probe_steps` steps' generations, and the steps that reuse them"),
    Field("min_new_tokens", INT64, TOKENS, TRAINER, "the completion length generation was held to at least in the "
       "step (a probe's forced max_completion_length: transformers' min_new_tokens or vLLM's min_tokens, as the "
       "generator received it); null when not forced"),
    Field("probe_kind", STRING, CHOICE, TRAINER, "how a probe step reached max_completion_length: `decode` (every token "
       "decoded, EOS masked) or `synthetic` (trainers/probe.py: the KV cache filled by chunked prefill, two short "
       "decode windows, and the training step on random full-length completions with random rewards, whose update is "
       "then undone; its reward_mean, reward_std, frac_reward_zero_std, distinct_completion_share and rewards/* "
       "are null: nothing was measured there); null on steps that are no probe"),
    Field("gen_peak_gib", FLOAT64, GIB_UNIT, TRAINER, "the step's memory peak up to the end of its generation (torch's "
       "peak allocated on a GPU, else the trainer's RSS high-water mark); null when the step generated nothing"),
    Field("peak_phase", STRING, CHOICE, TRAINER, "which phase set the step's peak in the trainer's own reading: "
       "`generation` (nothing after generation went above gen_peak_gib) or `training`; null when the step "
       "generated nothing"),
    Field("decode_ms_per_token_at_prompt", FLOAT64, "ms", TRAINER, "a synthetic probe's decode window right after the "
       "prompt: ms per decoding step of the whole batch (its prefill left out; with vLLM, included); null "
       "on other steps"),
    Field("decode_ms_per_token_at_full", FLOAT64, "ms", TRAINER, "the same with the context at max_prompt_length + "
       "max_completion_length; null on other steps and with vLLM (its pool does not grow with the context)"),
    Field("decode_window_tokens", INT64, TOKENS, TRAINER, "tokens decoded in each of a synthetic probe's windows; null "
       "on other steps"),
    Field("prefill_chunk_tokens", INT64, TOKENS, TRAINER, "tokens per chunk a synthetic probe prefilled its KV cache "
       "in; null on other steps, and where the stack's generate keeps no cache (it then decodes on the whole "
       "context, as that path does)"),
    Field("generated", BOOL, FLAG, TRAINER, "the step generated completions; false when it optimised over completions "
       "generated earlier (num_iterations > 1, or steps_per_generation > gradient accumulation)"),
    Field("step_s", FLOAT64, SECONDS, TRAINER, "the whole optimizer step"),
    Field("cycle_steps", FLOAT64, COUNT, TRAINER, "on the step that closes a generation cycle: how many optimizer "
       "steps the cycle had; null on other steps"),
    Field("gen_s", FLOAT64, SECONDS, TRAINER, "spent generating inside the step; null when the step generated nothing"),
    Field("train_s", FLOAT64, SECONDS, TRAINER, "the step less its generation (step_s - gen_s): forward, backward, "
       "optimizer, and with vLLM the weight sync into it"),
    Field("prompt_tokens", FLOAT64, TOKENS, TRAINER, "prompt tokens generation fed in the step (counted, not "
       "estimated); null when the step generated nothing"),
    Field("completion_tokens", FLOAT64, TOKENS, TRAINER, "completion tokens generation produced in the step "
       "(counted, not estimated); null when the step generated nothing"),
    Field("completions", INT64, COUNT, TRAINER, "completions generated in the step (K x the prompts this rank "
       "generated for); null when the step did not generate"),
    Field("decode_steps", FLOAT64, TOKENS, TRAINER, "decoding steps generation ran in the step: each generation "
       "call's longest completion (every sequence of a batch waits for it), summed over the step's calls; "
       "null when the step generated nothing"),
    Field("ms_per_token", FLOAT64, "ms", TRAINER, "milliseconds per decoding step: gen_s x 1000 / decode_steps, "
       "the time to add one token to every sequence decoded together; null when the step generated nothing"),
    Field("gen_share", FLOAT64, FRACTION, TRAINER, "generation's share of the step: gen_s / step_s; null when the "
       "step generated nothing"),
    Field("gen_t_start", FLOAT64, EPOCH_S, TRAINER, "wall clock at the step's first generation call's start "
       "(the sampler joins its samples to generation by it); null when the step generated nothing"),
    Field("gen_t_end", FLOAT64, EPOCH_S, TRAINER, "wall clock at the step's last generation call's end; null when "
       "the step generated nothing"),
    Field("tokens_per_s", FLOAT64, "tokens/s", TRAINER, "throughput of a generation cycle: (prompt + completion "
       "tokens generated in the cycle) / wall time of all the cycle's steps (its generation and every "
       "optimisation pass over those completions). Reported on the step that closes the cycle, null on the "
       "others; with num_iterations 1 every step is a cycle"),
    Field("estimated_tokens_per_step", FLOAT64, TOKENS, TRAINER, "an estimate, not a count: the original "
       "benchmark's (max_prompt_length + max_completion_length) x num_generations x "
       "per_device_train_batch_size, from configured limits (see metrics.csv below)"),
    Field("estimated_tokens_per_sec", FLOAT64, "tokens/s", TRAINER, "estimated_tokens_per_step / step_s, the "
       "original benchmark's throughput estimate"),
    Field("torch_allocated_gib", FLOAT64, GIB_UNIT, TRAINER, "torch allocated at step end (CUDA only)"),
    Field("torch_reserved_gib", FLOAT64, GIB_UNIT, TRAINER, "torch reserved at step end (CUDA only)"),
    Field("torch_peak_allocated_gib", FLOAT64, GIB_UNIT, TRAINER, "torch peak allocated within the step (reset at step "
       "start; CUDA only)"),
    Field("torch_peak_reserved_gib", FLOAT64, GIB_UNIT, TRAINER, "torch peak reserved within the step (reset at step "
       "start; CUDA only)"),
    Field("torch_peak_allocated_since_start_gib", FLOAT64, GIB_UNIT, TRAINER, "peak allocated since training began, "
       "running over the steps (CUDA only; null on CPU)"),
    Field("optimizer_state_gib", FLOAT64, GIB_UNIT, TRAINER, "the optimizer's state at the step's start (Adam's "
       "moments and step counts, in its own dtypes): allocated before step 1 (trainers/optimizer_state.py), so "
       "the first step's peak, a probe's, holds them as every later step's does; null without a torch optimizer"),
    Field("device_used_gib", FLOAT64, GIB_UNIT, SAMPLER, "NVML at step end (process memory where listed, else device used "
       "memory less what was in use before the trial)"),
    Field("device_peak_gib", FLOAT64, GIB_UNIT, SAMPLER, "NVML peak within the step (process memory where listed, else "
       "device used memory less what was in use before the trial)"),
    Field("rss_gib", FLOAT64, GIB_UNIT, SAMPLER, "trainer process RSS at step end"),
    Field("rss_peak_gib", FLOAT64, GIB_UNIT, SAMPLER, "trainer process RSS peak within the step"),
    Field("rank_device_peak_gib", STRING, JSON_TEXT, SAMPLER, "a trial over several ranks: each rank's NVML peak "
       "within the step on its own GPU, a list by rank (device_peak_gib is their max); null for one rank or "
       "without NVML"),
    Field("rank_rss_peak_gib", STRING, JSON_TEXT, SAMPLER, "a trial over several ranks: each rank's RSS peak "
       "within the step, a list by rank (rss_peak_gib is their max); null for one rank"),
    Field("gpu_util_pct", FLOAT64, "%", SAMPLER, "NVML utilisation, mean in the step: the trainer's own (SM "
       "utilisation of its processes) where NVML reports it per process, else the whole GPU's "
       "(gpu_util_source); null without NVML, never 0 for unmeasured"),
    Field("gen_util_pct", FLOAT64, "%", SAMPLER, "gpu_util_pct over the step's generation (gen_t_start to "
       "gen_t_end); null when the step generated nothing, no sample fell inside its generation, or without "
       "NVML"),
    Field("train_util_pct", FLOAT64, "%", SAMPLER, "gpu_util_pct over the rest of the step (its samples outside "
       "generation); null when none fell there or without NVML"),
    Field("gpu_util_source", STRING, CHOICE, SAMPLER, "what the step's utilisation figures measured: `process` "
       "(NVML's nvmlDeviceGetProcessUtilization for the trainer's PIDs) or `device` (nvmlDeviceGetUtilizationRates: "
       "the whole GPU, its neighbours' kernels included when trials share it); null without NVML"),
    Field("power_w", FLOAT64, "W", SAMPLER, "NVML power (mean in the step)"),
    Field("energy_j", FLOAT64, "J", SAMPLER, "power integrated over the step"),
    Field("samples", INT64, COUNT, SAMPLER, "memory samples taken within the step; 0: none fell inside it (a step "
       "shorter than the sampling interval), and its memory figures are the last sample before its end"),
    Field("alloc_retries", FLOAT64, COUNT, TRAINER, "torch's cudaMalloc calls that failed and were retried after "
       "freeing its cache, in the step (`torch.cuda.memory_stats` num_alloc_retries delta); null on CPU"),
    Field("alloc_ooms", FLOAT64, COUNT, TRAINER, "out-of-memory errors torch's allocator raised in the step "
       "(num_ooms delta), including ones a library caught and recovered from; null on CPU"),
    Field("reward_timeouts", FLOAT64, COUNT, TRAINER, "scoring calls (training rewards, and held-out accuracy checks "
       "when the step evaluates) stopped at `task_args.reward_timeout_s` and scored 0 in the step; null when "
       "no scoring ran in the step (a step that reuses its cycle's completions)"),
    Field("sandbox_kills", FLOAT64, COUNT, TRAINER, "the step's training completions whose run the task's sandbox "
       "killed (time, memory, file size or process limit, a forbidden call, a signal), each scored 0 in every "
       "reward (format too, unless `task_args.pay_format_when_killed` and the kill was a limit, not an act): "
       "a reward-hacking signal, a policy learning that hangs or bombs pay; null when the task runs no sandbox (every task but code) or the step "
       "scored nothing (it reuses its cycle's completions)"),
    Field("sandbox_kill_reasons", STRING, JSON_TEXT, TRAINER, "why the sandbox killed the step's `sandbox_kills` "
       "completions, reason -> count (at most 8 reasons), each reason as `rlsweep score` gives it: a limit "
       "(`time limit`, `memory limit (MemoryError)`, ...) or an act (`forbidden call (read outside its "
       "directory: /etc/hostname)`, `left running after the call: 1 process`, ...); `{}` when it killed none; "
       "null where `sandbox_kills` is"),
    Field("reward_mean", FLOAT64, "reward", TRAINER, "TRL's reward mean (weighted sum of the task's rewards)"),
    Field("reward_std", FLOAT64, "reward", TRAINER, "TRL's reward standard deviation"),
    Field("frac_reward_zero_std", FLOAT64, FRACTION, TRAINER, "groups whose rewards are all equal (no learning "
       "signal)"),
    Field("loss", FLOAT64, "loss", TRAINER, "TRL's training loss"),
    Field("grad_norm", FLOAT64, "norm", TRAINER, "TRL's gradient norm"),
    Field("update_ratio", FLOAT64, "ratio", TRAINER, "the step's change of the trainable weights over their size "
       "before it, norm(after - before) / norm(before) (LoRA's A and B; every weight in full fine-tuning): at 1 or "
       "more the step changed them by their own size; null above "
       f"{200_000_000:,} trainable parameters (not copied) or where the weights are sharded"),
    Field("kl", FLOAT64, "nats", TRAINER, "TRL's KL to the reference model (only when beta > 0)"),
    Field("entropy", FLOAT64, "nats", TRAINER, "TRL's mean token entropy"),
    Field("clip_ratio", FLOAT64, FRACTION, TRAINER, "TRL's clipped importance ratios"),
    Field("completion_len_mean", FLOAT64, TOKENS, TRAINER, "mean completion length"),
    Field("completion_len_max", FLOAT64, TOKENS, TRAINER, "longest completion"),
    Field("clipped_ratio", FLOAT64, FRACTION, TRAINER, "completions cut at max_completion_length"),
    Field("distinct_completion_share", FLOAT64, FRACTION, TRAINER, "distinct completion texts / completions "
       "generated in the step (texts compared by their token ids): 1 when every completion differs, "
       "1/completions when all are one text (a policy collapsing onto one answer); null when the step "
       "generated nothing, never 0 for not measured"),
    Field("learning_rate", FLOAT64, "rate", TRAINER, "the scheduler's learning rate at the step"),
    Field("t_start", FLOAT64, EPOCH_S, TRAINER, "wall clock at the step's start"),
    Field("t_end", FLOAT64, EPOCH_S, TRAINER, "wall clock at the step's end"),
    REWARD_CURVE,
    Field("eval_pass_at_1", FLOAT64, FRACTION, TRAINER, "held-out accuracy, pass@1 estimated from all k samples per "
       "prompt; null on steps without evaluation"),
    Field("eval_pass_at_k", FLOAT64, FRACTION, TRAINER, "held-out pass@k: share of prompts with at least one correct "
       "of k samples"),
    Field("eval_k", FLOAT64, COUNT, TRAINER, "k, samples per held-out prompt"),
    Field("eval_prompts", FLOAT64, COUNT, TRAINER, "held-out prompts evaluated"),
    Field("eval_s", FLOAT64, SECONDS, TRAINER, "wall time of the evaluation (not part of step_s)"),
    Field("extra", STRING, JSON_TEXT, TRAINER, "any other number the trainer reported, by name"),
)  # fmt: skip

# The fields the supervisor's sampler measures over a step's wall times, overlaid on the trainer's row.
SAMPLER_FIELDS = tuple(f.name for f in STEP_FIELDS if f.measured_by == SAMPLER)

# One row per trial, every status (trials.parquet; also the resume ledger).
TRIAL_FIELDS: tuple[Field, ...] = (
    Field("trial_key", STRING, KEY, SPEC, "`<stack>-<mode>-<model short>-k<K>-b<B>-<12 hex of the other settings "
       "and the full model name>`; stable across runs"),
    Field("sweep", STRING, TEXT, SPEC, "sweep name"),
    Field("stack", STRING, CHOICE, SPEC, "`trl`, `unsloth`"),
    Field("mode", STRING, CHOICE, SPEC, "`grpo` (token-level IS), `gspo` (sequence-level)"),
    Field("model", STRING, TEXT, SPEC, "hub id, local dir, a config.json's path, `random:<hub id>` or `tiny`"),
    Field("task", STRING, TEXT, SPEC, "task name"),
    Field("num_generations", INT64, COUNT, SPEC, "K, completions per prompt"),
    Field("batch_size", INT64, COUNT, SPEC, "B, prompts per optimizer step"),
    Field("micro_batch_size", INT64, COUNT, SPEC, "completions per forward/backward on each rank (effective: B×K "
       "when unset; B×K/N over N ranks)"),
    Field("max_prompt_length", INT64, TOKENS, SPEC, "longest prompt"),
    Field("max_completion_length", INT64, TOKENS, SPEC, "longest completion"),
    Field("quantization", STRING, CHOICE, SPEC, "`nf4`, `none`"),
    Field("dtype", STRING, CHOICE, SPEC, "requested dtype (`auto`, ...); what ran is in effective_config"),
    Field("lora_r", INT64, COUNT, SPEC, "LoRA rank"),
    Field("seed", INT64, COUNT, SPEC, "random seed"),
    Field("max_steps", INT64, COUNT, SPEC, "optimizer steps asked for"),
    Field("status", STRING, CHOICE, SUPERVISOR, "`completed` · `oom` · `pruned` · `failed` · `timeout` (killed at "
       "its wall-clock limit, `timeout_s`: its measured steps are kept, judged (training_verdict) and "
       "drawn; not evidence of out of memory, nor of a fit beyond them; its peak counts as a lower bound: the "
       "report's frontier says it fits on those steps, or over the budget that it does not fit) · "
       "`unavailable` · `stopped` · `implied` (fits without "
       "a probe of its own: see implied_by)"),
    Field("status_detail", STRING, TEXT, SUPERVISOR, "a sentence to act on: exception + trainer output tail (failed), "
       "or the refusal alone when the settings do not fit the task (failed: e.g. `max_prompt_length: the "
       "task's longest prompt is 300 tokens, over the limit of 256; raise …`), the reading and budget (guard "
       "oom), `dominated by <trial_key> (...)` (pruned), `fits: implied by <trial_key> (...)` (implied), what is "
       "missing (unavailable), `interrupted` (stopped), the limit, the steps measured and the fix (timeout: "
       "`killed at the wall-clock limit of 1200 s with 5 of 10 steps measured (kept); to finish, raise the "
       "limit ...`)"),
    Field("steps_completed", INT64, COUNT, RECORDER, "distinct optimizer steps reported"),
    Field("peak_device_gib", FLOAT64, GIB_UNIT, SAMPLER, "NVML peak of the trainer over the trial: its process memory, else "
       "the device's less what was in use before the trial (gpu_memory_source); null without NVML"),
    Field("peak_torch_reserved_gib", FLOAT64, GIB_UNIT, RECORDER, "max of the steps' torch peak reserved"),
    Field("peak_rss_gib", FLOAT64, GIB_UNIT, SAMPLER, "trainer process resident memory peak (sampler VmHWM or steps)"),
    Field("vllm_server_peak_gib", FLOAT64, GIB_UNIT, SUPERVISOR, "vllm_mode server: the vLLM server's peak (its process's "
       "GPU memory as NVML lists it on a GPU, the RSS of its process tree on a CPU), not in the trainer's peaks; "
       "null in other modes"),
    Field("median_step_s", FLOAT64, SECONDS, RECORDER, "median step time over non-probe steps (all steps if only "
       "probes)"),
    Field("median_tokens_per_s", FLOAT64, "tokens/s", RECORDER, "per generation cycle (the steps' `tokens_per_s`), "
       "median over the cycles whose completions were not forced (non-probe)"),
    Field("median_tokens_per_s_lo", FLOAT64, "tokens/s", RECORDER, "low end of median_tokens_per_s's 95% interval (a "
       "bootstrap over the trial's measured cycles, orchestrator/judging/intervals.py); null below the "
       "minimum of cycles (intervals.MIN_CYCLES)"),
    Field("median_tokens_per_s_hi", FLOAT64, "tokens/s", RECORDER, "high end of median_tokens_per_s's 95% interval; "
       "null below the minimum of cycles"),
    Field("cycles_measured", INT64, COUNT, RECORDER, "the generation cycles median_tokens_per_s is the median of "
       "(non-probe steps that reported tokens_per_s)"),
    Field("wall_s", FLOAT64, SECONDS, SUPERVISOR, "from trainer start to its exit, imports and model load included; "
       "a shape of a probe session: from the moment its settings were sent to its end (its session's start-up "
       "is session_startup_s)"),
    Field("session", STRING, KEY, SUPERVISOR, "the probe session the trial ran in, one trainer process that loaded "
       "the model once and ran shape after shape (orchestrator/running/session.py); null: a process of its own"),
    Field("session_startup_s", FLOAT64, SECONDS, SUPERVISOR, "its session's start-up (launch to the model loaded "
       "and ready), on the session's first shape only: summed over the rows it counts once; null on the other "
       "shapes and on a trial in a process of its own"),
    Field("gpu_name", STRING, TEXT, TRAINER, "from the trainer's `started` event; null on CPU"),
    Field("gpu_total_gib", FLOAT64, GIB_UNIT, TRAINER, "the GPU's memory; null on CPU"),
    Field("versions", STRING, JSON_TEXT, TRAINER, "torch, transformers, trl, peft, accelerate, bitsandbytes, datasets, "
       "unsloth..."),
    Field("effective_config", STRING, JSON_TEXT, TRAINER, "the configuration the constructed trainer actually held; "
       "with generation vllm also `vllm_gpu_memory_utilization_asked` and `vllm_gpu_memory_utilization` (passed "
       "to vLLM: scaled to memory_budget_gib), on CPU `vllm_cpu_kvcache_space_gib`"),
    Field("lora_alpha", INT64, COUNT, SPEC, "LoRA alpha"),
    Field("lora_dropout", FLOAT64, FRACTION, SPEC, "LoRA dropout"),
    Field("learning_rate", FLOAT64, "rate", SPEC, "the optimizer's learning rate"),
    Field("beta", FLOAT64, "coefficient", SPEC, "KL coefficient"),
    Field("num_iterations", INT64, COUNT, SPEC, "optimisation passes per generation batch"),
    Field("temperature", FLOAT64, "temperature", SPEC, "sampling temperature"),
    Field("loss_type", STRING, CHOICE, SPEC, "TRL loss_type"),
    Field("gradient_checkpointing", BOOL, FLAG, SPEC, "requested (ignored on CPU)"),
    Field("probe_steps", INT64, COUNT, SPEC, "leading worst-case steps"),
    Field("probe_kind", STRING, CHOICE, SPEC, "how probe steps reach max_completion_length: `synthetic` (default) or "
       "`decode` (steps.parquet's probe_kind says what each step did)"),
    Field("extrapolated_step_s", FLOAT64, SECONDS, RECORDER, "a synthetic probe's step at max_completion_length, "
       "extrapolated, not measured: the prompt's prefill and max_completion_length decoding steps at the "
       "ms per token its two decode windows read (linear between them), plus its measured training step "
       "(orchestrator/judging/speed.py predict_step); null for trials without a synthetic probe step"),
    Field("memory_budget_gib", FLOAT64, GIB_UNIT, SPEC, "emulated card size; null = the device's total"),
    Field("budget_margin_gib", FLOAT64, GIB_UNIT, RECORDER, "the budget (memory_budget_gib, else the GPU's total) less the "
       "trial's peak (the record's peak: GPU, else torch reserved, else RSS); negative when the peak passed "
       "it; null without a budget or a peak"),
    Field("budget_margin_pct", FLOAT64, "%", RECORDER, "budget_margin_gib as a share of the budget, in percent"),
    Field("tight", BOOL, FLAG, RECORDER, "the peak fits the budget by less than the run-to-run spread of peaks "
       "(intervals.TIGHT_SPREAD of the peak, measured in docs/benchmarks.md): another seed may not fit; "
       "null without a margin"),
    Field("trainer_s", FLOAT64, SECONDS, RECORDER, "sum of step_s (time inside optimizer steps)"),
    Field("median_gen_share", FLOAT64, FRACTION, RECORDER, "median of the steps' gen_share over the non-probe "
       "steps that generated (all generating steps if only probes); null when none generated"),
    Field("median_ms_per_token", FLOAT64, "ms", RECORDER, "median of the steps' ms_per_token over the same steps; "
       "null when none generated"),
    Field("median_gen_util_pct", FLOAT64, "%", RECORDER, "median of the steps' gen_util_pct over the same steps; "
       "null where it was not measured (a CPU host, no sample inside generation)"),
    Field("gpu_util_source", STRING, CHOICE, RECORDER, "`process` when any step's utilisation was the trainer's "
       "own, else `device` (the whole GPU's), null without NVML (the steps' gpu_util_source)"),
    Field("time_to_first_step_s", FLOAT64, SECONDS, RECORDER, "from the trainer's start (started_at: imports, "
       "model load, the trainer's construction, the held-out evaluation before training where one was asked) "
       "to the end of its first step (that step's t_end); null when no step ended"),
    Field("eval_before_pass_at_1", FLOAT64, FRACTION, TRAINER, "held-out accuracy (pass@1, as the steps' "
       "eval_pass_at_1) of the model before its first step: the baseline a learning trial is judged against; "
       "null when the trial evaluated nothing (eval_every 0 and no eval_at_end)"),
    Field("eval_before_prompts", FLOAT64, COUNT, TRAINER, "held-out prompts of that evaluation"),
    Field("warmup_s", FLOAT64, SECONDS, RECORDER, "what the first step paid once (Unsloth's and Inductor's "
       "compilation, Triton's kernels, CUDA's first calls): its step_s less the median step_s of the later "
       "steps like it (the same probe and generated flags); null when no later step is like it. Slightly "
       "negative when the first step was no slower than the rest"),
    Field("exit_code", INT64, "exit status", SUPERVISOR, "trainer exit code; negative = killed by that signal"),
    Field("cuda_visible_devices", STRING, TEXT, SUPERVISOR, "what the trainer child was given (`\"\"` = no GPU)"),
    Field("started_at", TIMESTAMP, TIME, SUPERVISOR, "trainer start"),
    Field("ended_at", TIMESTAMP, TIME, SUPERVISOR, "trainer end"),
    Field("config", STRING, JSON_TEXT, SPEC, "the full TrialSpec (every knob)"),
    Field("context_gib", FLOAT64, GIB_UNIT, TRAINER, "the trainer's CUDA context measured right after it was created; "
       "counted within memory_budget_gib (docs/oom.md); null on CPU or without NVML"),
    Field("context_source", STRING, CHOICE, TRAINER, "how context_gib was measured: `process` (NVML's figure for the "
       "trainer's PID) or `device` (device memory used after minus before: NVML cannot see the PID, e.g. a "
       "container's own PID namespace); null when not measured"),
    Field("alloc_conf", STRING, TEXT, TRAINER, "torch's allocator setting the trainer ran with (`PYTORCH_ALLOC_CONF`, "
       "else `PYTORCH_CUDA_ALLOC_CONF`), the same for both stacks; default `expandable_segments:True`"),
    Field("gpu_memory_source", STRING, CHOICE, SAMPLER, "where the trial's GPU figures (peak_device_gib, the steps' "
       "device_*) came from: `process` (NVML lists the trainer) or `device` (device used memory less what was "
       "in use before the trial started); null without NVML"),
    Field("training_verdict", STRING, CHOICE, VERDICT, "a completed trial's training verdict, or a timeout's "
       "judged on the steps it kept (null for other statuses and a timeout with no step): `diverged` · "
       "`memory_creep` · `no_signal` · `truncated` · `collapsed` (the problems) · "
       "`learning` · `ok` (nothing wrong, no evidence of learning) · `too_short`; the first that holds in that "
       "order (see Training verdicts below)"),
    Field("training_verdict_detail", STRING, TEXT, VERDICT, "every verdict that holds, `; `-joined, each with the "
       "steps and figures that triggered it (e.g. `no_signal: frac_reward_zero_std >= 0.95 for 5 steps in a "
       "row (steps 1-5: 1.00, ...)`); a timeout's ends `judged on the 19 of 20 steps measured before the "
       "time limit`"),
    Field("predicted_peak_gib", FLOAT64, GIB_UNIT, MEMORY_MODEL, "the memory model's prediction of the trial's peak "
       "(orchestrator/judging/memory; the measure its sweep's trials are measured in: GPU, torch reserved or "
       "RSS), made just before the trial ran (or was skipped) from the trials finished before it; null when "
       "no prediction was made or none could be (an unknown model config, vLLM's pool without measured "
       "trials)"),
    Field("predicted_low_gib", FLOAT64, GIB_UNIT, MEMORY_MODEL, "the low end of the prediction's interval; null when no "
       "prediction"),
    Field("predicted_high_gib", FLOAT64, GIB_UNIT, MEMORY_MODEL, "the high end of the prediction's interval; null when no "
       "prediction"),
    Field("predicted_from_trials", INT64, COUNT, MEMORY_MODEL, "measured trials of the trial's family the prediction "
       "was fitted on; 0 = the prior (no trial measured yet); null when no prediction"),
    Field("predicted_basis", STRING, CHOICE, MEMORY_MODEL, "`prior` (analytical terms only) or `fitted` "
       "(coefficients fitted on measured trials); null when no prediction"),
    Field("phase", STRING, CHOICE, SUPERVISOR, "the phase the row's figures come from: `memory` (probe steps and the "
       "first steady generation cycle: the trial fits, or ended `oom` there) or `speed` (its full steps, "
       "alone on its GPU; also every trial of a sweep without a budget); null for a trial that did not run "
       "(pruned, unavailable, stopped before starting)"),
    Field("adapter", STRING, CHOICE, SPEC, "`lora` (LoRA adapters on a frozen base) or `none` (full fine-tuning)"),
    Field("num_processes", INT64, COUNT, SPEC, "ranks the trial ran as (one GPU each on a GPU host; CPU processes "
       "over gloo without one)"),
    Field("distributed", STRING, CHOICE, SPEC, "how the ranks shared the model: `none` · `ddp` · `fsdp` · `zero2` · "
       "`zero3`"),
    Field("rank_peak_device_gib", STRING, JSON_TEXT, SAMPLER, "each rank's NVML peak over the trial, a list by rank "
       "(peak_device_gib is their max, the per-GPU figure the budget is held to); null for one rank"),
    Field("rank_peak_rss_gib", STRING, JSON_TEXT, SAMPLER, "each rank's RSS peak over the trial, a list by rank "
       "(peak_rss_gib is their max); null for one rank"),
    Field("settled_step", INT64, COUNT, SUPERVISOR, "the step at which the settled stop (`stop.when_settled`) ended "
       "the speed phase: peak memory had not grown for `stop.settle_steps` steps and the median tokens/s was "
       "known within `stop.settle_half_width`; null when it ran to max_steps or the stop was off"),
    Field("accuracy_target", FLOAT64, FRACTION, RECORDER, "the held-out accuracy (eval_pass_at_1) the to-target "
       "figures count to: the sweep's `verdict.accuracy_target`"),
    Field("steps_to_accuracy_target", INT64, COUNT, RECORDER, "the first step whose held-out accuracy "
       "(eval_pass_at_1) reached accuracy_target; null when it never did or was never measured"),
    Field("seconds_to_accuracy_target", FLOAT64, SECONDS, RECORDER, "training time to that step: the sum of "
       "step_s through it (evaluation and start-up left out); null when the target was not reached"),
    Field("gpu_seconds_to_accuracy_target", FLOAT64, "GPU-s", RECORDER, "seconds_to_accuracy_target x the GPUs the "
       "trial ran on (its ranks); null on CPU or when the target was not reached"),
    Field("best_eval_pass_at_1", FLOAT64, FRACTION, RECORDER, "the highest held-out accuracy (eval_pass_at_1) of "
       "the trial's evaluations (the best of several noisy readings leans high); null when none was measured"),
    Field("best_eval_pass_at_1_lo", FLOAT64, FRACTION, RECORDER, "low end of its 95% Wilson interval over the "
       "evaluation's eval_prompts (prompts, not samples, count: a prompt's k samples are not independent)"),
    Field("best_eval_pass_at_1_hi", FLOAT64, FRACTION, RECORDER, "high end of that interval"),
    Field("best_eval_step", INT64, COUNT, RECORDER, "the step of that evaluation (the first, on a tie)"),
    Field("implied_by", STRING, KEY, SEARCH, "status `implied`: the key of the measured trial that fits its budget "
       "and dominates this one (every size knob >=, the rest equal), so this one fits without a probe of its "
       "own; its predicted_* columns hold the memory model's figure and every measured column is null. Null "
       "for every other status (a trial the model predicted over the budget is probed instead)"),
)  # fmt: skip
