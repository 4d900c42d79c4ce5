"""The sweep's settings: SweepSpec and its sections (pydantic models). orchestrator/spec/load.py reads a
sweep file into one, with every error reported at once and named by its place in the file.

A sweep file is YAML:

    name: cpu-smoke
    task: arithmetic            # and task_args: {...}; or grid.task: [arithmetic, countdown]
    task_settings: {countdown: {num_numbers: 4}}   # per task, merged over task_args for that task
    grid:                       # any TrialSpec knob; a list is swept, a scalar is fixed
      stack: [trl, unsloth]
      num_generations: [2, 4]
    fixed: {model: tiny, max_steps: 3}
    resources: {gpus_per_trial: 1, cpus_per_trial: 1, max_concurrent: 2}
    memory: {budget_gib: 16}
    oom: {probe_steps: 2, prune_dominated: true}
    tracking: {mlflow_uri: null, experiment: null}
    verdict: {no_signal_steps: 5, stop_on: [diverged]}   # training verdict thresholds (orchestrator/judging/verdict.py)
    timeout_s: 3600
    output_dir: outputs/cpu-smoke
    max_trials: 10000           # the largest grid accepted (the product of the list lengths)

The sections are pydantic models (types, ranges, unknown keys); trial knobs are checked by
trainers.trial (the same rules the trainer applies), element by element for grid lists, and here for
what no trial can hold (NaN, infinity, integers past 32 bits). A file is read only when it is small
UTF-8 text whose aliases do not multiply it (a "billion laughs" file is refused before it expands).
The base section, the integer limits and the verdict and stop sections are _sections.py's, imported here.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from orchestrator.spec._foreign import FOREIGN_NAMES as FOREIGN_NAMES
from orchestrator.spec._foreign import unknown_name_hint as unknown_name_hint
from orchestrator.spec._sections import INT_MAX, Section, Stop, Verdict
from orchestrator.spec._sections import INT_MAXIMA as INT_MAXIMA
from orchestrator.words.phases import MEMORY, PHASES, SPEED
from orchestrator.words.settings import GUARD as DEFAULTS
from orchestrator.words.settings import VERDICT as VERDICT
from orchestrator.words.settings import GuardSettings
from trainers.trial import BOOKKEEPING, KNOBS, PROBE_KINDS, knob_default

if TYPE_CHECKING:
    from orchestrator.words.storage import StoragePath

# A sweep file sets every knob but the bookkeeping ones, which the orchestrator fills in per trial.
SWEEP_KNOBS = [k for k in KNOBS if k not in BOOKKEEPING]


class Resources(Section):
    gpus_per_trial: float = Field(
        1,
        ge=0,
        description="GPUs each trial holds (ignored on a host without GPUs). A whole number N > 1 runs "
        "each trial as N ranks (the trial knob num_processes, which a grid may sweep instead), one "
        "GPU each on one node; without a GPU, N CPU processes.",
    )

    @field_validator("gpus_per_trial")
    @classmethod
    def _whole_gpus_for_ranks(cls, value: float) -> float:
        if value > 1 and not float(value).is_integer():
            raise ValueError(
                f"{value:g} GPUs: more than one GPU per trial means one rank on each, so give a whole "
                f"number, e.g. {math.floor(value)} or {math.ceil(value)}"
            )
        return value

    cpus_per_trial: int = Field(
        1, ge=1, le=INT_MAX, description="CPU cores each trial holds; also the trainer's thread count."
    )
    max_concurrent: int | None = Field(
        None, ge=1, le=INT_MAX, description="Most trials at once; default: as many as the resources allow."
    )
    gpu_memory_gib: float | None = Field(
        None,
        gt=0,
        description="Memory of one GPU, for packing memory-phase trials; default what NVML reads of the "
        "driver's first GPU (set it where NVML cannot see the workers' GPUs, or for Ray's fake GPUs).",
    )
    memory_phase_per_gpu: int | None = Field(
        None,
        ge=1,
        le=INT_MAX,
        description="Memory-phase trials sharing one GPU; default as many as fit (budget + headroom each).",
    )
    memory_phase_headroom_gib: float = Field(
        1.0,
        ge=0,
        description="GiB kept free for each packed memory-phase trial over its budget (the guard's margin, "
        "the allocator's slack).",
    )


class Memory(Section):
    budget_gib: float | None = Field(
        DEFAULTS.budget_gib,
        gt=0,
        description="Emulate a card of this size; default the device's total memory.",
    )
    margin_gib: float | None = Field(
        DEFAULTS.margin_gib,
        ge=0,
        description=f"Allowance over the budget before the guard kills; default {DEFAULTS.margin_gib:g} (the "
        "budget is the card: the CUDA context counts within it).",
    )
    sample_hz: float = Field(
        DEFAULTS.sample_hz, gt=0, le=1000, description="Memory sampling rate in the supervisor."
    )
    headroom_gib: float = Field(
        0.0,
        ge=0,
        description="GiB a configuration must leave free under the budget to count as fitting (the report's "
        "frontier, matrices and ranking; rlsweep solve); default 0: a peak up to the budget fits. A fit closer "
        'to the budget than the run-to-run spread of peaks reads "tight" either way.',
    )

    @model_validator(mode="after")
    def _headroom_under_budget(self):
        if self.budget_gib is not None and self.headroom_gib >= self.budget_gib:
            raise ValueError(
                f"memory.headroom_gib: {self.headroom_gib:g} GiB leaves nothing of the {self.budget_gib:g} GiB "
                f"budget; it must be below memory.budget_gib: lower it (e.g. {self.budget_gib / 10:g})"
            )
        return self


class Oom(Section):
    probe_steps: int = Field(
        DEFAULTS.probe_steps,
        ge=0,
        le=INT_MAX,
        description="Leading worst-case steps (completions forced to max length).",
    )
    probe_kind: Literal[PROBE_KINDS] = Field(  # type: ignore[valid-type]
        knob_default("probe_kind"),
        description="How probe steps reach max_completion_length: `synthetic` (the default: the KV cache "
        "filled by chunked prefill, two short decode windows, the training step on random full-length "
        "completions; seconds a probe) or `decode` (every token decoded with EOS masked; minutes at long "
        "lengths on a GPU). Both measure the same peak (trainers/probe.py); decode stays for a final check.",
    )
    prune_dominated: bool = Field(True, description="Skip trials that dominate one that ran out of memory.")
    session: bool = Field(
        True,
        description="Run the memory phase's probes in probe sessions (orchestrator/running/session.py): "
        "one trainer process per (model, stack, quantization, adapter, ...) loads the model once and runs "
        "probe after probe, each a trial with its own peak (trials.parquet's `session` names it). false: "
        "one process per trial.",
    )
    wait_for_smaller: bool = Field(True, description="Hold a trial while a smaller sibling is still running.")
    frontier: bool = Field(
        True,
        description="Frontier search in the memory phase (orchestrator/judging/frontier.py): a trial that a "
        "measured fit dominates (every size knob <=, the rest equal) fits too, and is recorded `implied` "
        "(implied_by names that trial) without a probe, unless the memory model predicts its peak over the "
        "budget; the rest are probed in bisection order, so the probes grow with the frontier, not the grid. "
        "false: every trial is probed, in plan order.",
    )
    predict: bool = Field(
        False,
        description="Skip a trial whose predicted peak memory (orchestrator/judging/memory), even at its interval's "
        "lower bound, is above memory.budget_gib (status pruned, with the prediction); never one whose "
        "interval crosses the budget. Runs the rest so the trials that teach the memory model most go "
        "first. Needs memory.budget_gib. Every trial's row records its prediction either way.",
    )


class Tracking(Section):
    mlflow_uri: str | None = Field(
        None,
        description="MLflow tracking URI; default MLFLOW_TRACKING_URI, else mlflow.db in the output dir's "
        "parent folder (outputs/mlflow.db for outputs/<name>).",
    )
    experiment: str | None = Field(None, description="MLflow experiment; default the sweep name.")
    enabled: bool = Field(True, description="false: write Parquet only (sync-mlflow can log it later).")


class SweepSpec(Section):
    name: str = Field(..., min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", description="Sweep name.")
    task: str = Field("arithmetic", description="Task (dataset + reward).")
    task_args: dict[str, Any] = Field(default_factory=dict, description="Task settings.")
    task_settings: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Task name -> settings merged over task_args for trials of that task "
        "(for grid.task sweeps, where each task takes its own settings).",
    )
    grid: dict[str, Any] = Field(
        default_factory=dict, description="Knob -> value or list of values to sweep."
    )
    fixed: dict[str, Any] = Field(default_factory=dict, description="Knob -> value for every trial.")
    resources: Resources = Field(default_factory=Resources)
    memory: Memory = Field(default_factory=Memory)
    oom: Oom = Field(default_factory=Oom)
    tracking: Tracking = Field(default_factory=Tracking)
    verdict: Verdict = Field(default_factory=Verdict)
    phases: list[Literal[PHASES]] = Field(
        list(PHASES),
        min_length=1,
        description="With a memory budget: memory (probe steps + the first steady generation cycle per trial, packed onto "
        "shared GPUs where possible) then speed (the trials that fit run their full steps, one per GPU); "
        "[memory] stops after the first. Without a budget only speed runs.",
    )
    stop: Stop = Field(default_factory=Stop)
    timeout_s: float | None = Field(
        DEFAULTS.timeout_s, gt=0, description="Wall-clock limit per trial in seconds."
    )
    output_dir: str | None = Field(None, description="Default outputs/<name>.")
    max_trials: int = Field(
        10_000,
        ge=1,
        le=INT_MAX,
        description="Refuse a grid of more trials than this (the product of its list lengths); raise it "
        "for a bigger sweep.",
    )

    @field_validator("phases")
    @classmethod
    def _phases(cls, value: list[str], info: ValidationInfo) -> list[str]:
        if len(set(value)) != len(value) or value != [p for p in PHASES if p in value]:
            raise ValueError(f"give each phase once, in the order {', '.join(PHASES)}")
        memory = info.data.get("memory")
        if value == [MEMORY] and memory is not None and memory.budget_gib is None:
            raise ValueError(
                "[memory] needs memory.budget_gib (the memory phase judges trials against it); set "
                "memory.budget_gib, or run phases: [speed]"
            )
        return value

    def phases_to_run(self) -> tuple[str, ...]:
        """The phases this sweep runs: without a budget only the speed phase."""
        return tuple(self.phases) if self.memory.budget_gib is not None else (SPEED,)

    def axes(self) -> dict[str, list[Any]]:
        """Swept knob -> its values (scalars in grid count as one value)."""
        return {k: (v if isinstance(v, list) else [v]) for k, v in self.grid.items()}

    def base(self) -> dict[str, Any]:
        """Settings every trial shares, before the grid."""
        base = {"task": self.task, "task_args": self.task_args, "sweep": self.name}
        if self.memory.budget_gib is not None:
            base["memory_budget_gib"] = self.memory.budget_gib
        base["probe_steps"] = self.oom.probe_steps
        base["probe_kind"] = self.oom.probe_kind
        base["num_threads"] = self.resources.cpus_per_trial
        if self.resources.gpus_per_trial > 1:
            base["num_processes"] = int(self.resources.gpus_per_trial)
        return {**base, **self.fixed}

    def guard(self) -> GuardSettings:
        """The memory guard's and sampler's settings every trial of this sweep runs under."""
        return GuardSettings(
            budget_gib=self.memory.budget_gib,
            margin_gib=self.memory.margin_gib,
            sample_hz=self.memory.sample_hz,
            timeout_s=self.timeout_s,
            probe_steps=self.oom.probe_steps,
        )

    def task_args_for(self, task: str, task_args: dict[str, Any]) -> dict[str, Any]:
        return {**task_args, **self.task_settings.get(task, {})}

    def resolved_output_dir(self, override: str | None = None):
        """An absolute Path, or a RemotePath for a URI (s3://, gs://): see orchestrator/words/storage.py.
        Raises SweepError, before anything is written, for a place a sweep must not write to."""
        from orchestrator.words.storage import output_dir_problems, output_location

        place = "--output-dir" if override else "output_dir" if self.output_dir else "output_dir (default)"
        text = str(override or self.output_dir or Path("outputs") / self.name)
        location = output_location(text)
        problems = output_dir_problems(text, location)
        if problems:
            raise SweepError([f"{place}: {problem}" for problem in problems])
        return location

    def tracking_uri(self, output_dir: StoragePath) -> str:
        """tracking.mlflow_uri, else MLFLOW_TRACKING_URI, else mlflow.db next to the output dir (in its
        parent folder: outputs/<name> -> outputs/mlflow.db, whatever the working directory); a remote
        output dir has no such place, so its default is outputs/mlflow.db under the working directory."""
        from orchestrator.words.storage import is_remote

        beside = Path("outputs").resolve() if is_remote(output_dir) else Path(output_dir).resolve().parent
        return (
            self.tracking.mlflow_uri
            or os.environ.get("MLFLOW_TRACKING_URI")
            or f"sqlite:///{beside / 'mlflow.db'}"
        )

    def experiment_name(self) -> str:
        return self.tracking.experiment or self.name


class SweepError(ValueError):
    def __init__(self, errors: list[str], source: str = ""):
        self.errors = errors
        self.source = source
        head = f"{source}: " if source else ""
        super().__init__(f"{head}{len(errors)} error(s):\n  " + "\n  ".join(errors))
