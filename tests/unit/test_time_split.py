"""Where the time goes: generation's share, ms per decoding step and GPU utilisation per phase, and the
latency-bound judgement, checked on the H100 rows (bench/data/h100-2026-11-26); NVML faked for the
sampler's per-process utilisation."""

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.running.telemetry import MemorySampler, Sample, summarize_window
from orchestrator.views.report._time import families, time_paragraphs
from tests.helpers.nvml import FakeNvml, fake_gpu
from trainers.record import STEP, TRIAL, renamed_keys, step_ms_per_token, time_split_figures

H100 = Path(__file__).parents[2] / "bench" / "data" / "h100-2026-11-26"


def h100_round1() -> tuple[pd.DataFrame, pd.DataFrame]:
    trials, steps = [], []
    for folder in sorted((H100 / "round1").glob("*/")):
        if not (folder / "steps.parquet").is_file():
            continue
        s = pd.read_parquet(folder / "steps.parquet")
        trials.append(
            {
                **renamed_keys(json.loads((folder / "trial.json").read_text())["config"])[0],
                "trial_key": s.trial_key[0],
            }
        )
        steps.append(s)
    return pd.DataFrame(trials), pd.concat(steps)


def test_a_step_recorded_before_decode_steps_reads_its_ms_per_token_from_its_longest_completion():
    assert step_ms_per_token({STEP.gen_s: 13.337, STEP.completion_len_max: 128.0}) == pytest.approx(
        104.2, 0.01
    )
    assert step_ms_per_token({STEP.gen_s: None, STEP.completion_len_max: 128.0}) is None


def test_a_trial_without_utilisation_has_a_null_gen_util_never_zero():
    figures = time_split_figures(
        [{STEP.step: 1, STEP.gen_s: 9.0, STEP.step_s: 10.0, STEP.completion_len_max: 90}]
    )
    assert figures[TRIAL.median_gen_share] == pytest.approx(0.9)
    assert figures[TRIAL.median_ms_per_token] == pytest.approx(100.0)
    assert figures[TRIAL.median_gen_util_pct] is None and figures[TRIAL.gpu_util_source] is None


def test_on_the_h100_rows_3b_generation_is_latency_bound_for_both_stacks():
    trials, steps = h100_round1()
    by_label = {f.label: f for f in families(trials, steps)}
    trl = by_label["TRL Qwen2.5-3B-Instruct, completions up to 128 tokens"]
    unsloth = by_label["Unsloth Qwen2.5-3B-Instruct, completions up to 128 tokens"]
    # TRL: 2 sequences at 104 ms per token, 16 at 107: eight times the sequences, 3% more per token.
    assert (trl.lo, trl.hi) == (2, 16)
    assert trl.median_at(2) == pytest.approx(104.2, abs=0.1) and trl.median_at(16) == pytest.approx(
        107.0, abs=0.1
    )
    assert trl.share > 0.9 and trl.latency_bound
    assert unsloth.growth == pytest.approx(1.17, abs=0.01) and unsloth.latency_bound


def test_the_report_says_latency_bound_what_it_means_for_tokens_per_s_and_what_raises_throughput():
    words = " ".join(time_paragraphs(*h100_round1()))
    assert (
        "16 sequences decoded together took 107 ms per token, 2 took 104 ms (x8 the sequences, +3% per token)"
        in words
    )
    assert "latency-bound" in words
    assert "Tokens/s then measures the batch" in words and "vLLM" in words


def test_a_single_count_of_sequences_without_per_process_utilisation_is_not_judged():
    trials, steps = h100_round1()
    [alone] = [f for f in families(trials, steps) if "1.5B" in f.label]
    assert alone.latency_bound is None


def sample(t: float, device: float | None, own: float | None = None) -> Sample:
    return Sample(
        t=t, rss_gib=1.0, hwm_gib=None, host_available_gib=8.0, gpu_util_pct=device, process_util_pct=own
    )


def test_utilisation_is_split_between_generation_and_the_rest_of_the_step_by_time():
    samples = [sample(0.5, 90, 10), sample(1.5, 90, 20), sample(2.5, 95, 80), sample(3.5, 95, 90)]
    w = summarize_window(samples, 0.0, 4.0, gen=(0.0, 2.0))
    assert w[STEP.gen_util_pct] == 15 and w[STEP.train_util_pct] == 85
    assert w[STEP.gpu_util_source] == "process" and w[STEP.gpu_util_pct] == 50


def test_without_per_process_utilisation_the_whole_gpus_stands_in_and_says_so():
    w = summarize_window([sample(0.5, 12), sample(1.5, 70)], 0.0, 2.0, gen=(0.0, 1.0))
    assert w[STEP.gen_util_pct] == 12 and w[STEP.train_util_pct] == 70 and w[STEP.gpu_util_source] == "device"


def test_on_a_cpu_host_utilisation_is_null_never_zero():
    w = summarize_window([sample(0.5, None)], 0.0, 1.0, gen=(0.0, 1.0))
    assert w[STEP.gen_util_pct] is None and w[STEP.gpu_util_pct] is None and w[STEP.gpu_util_source] is None


def test_the_sampler_reads_the_trainers_own_utilisation_where_nvml_lists_it_per_process():
    me = os.getpid()
    nvml = FakeNvml([fake_gpu(0, process_util=[(me, 12, 1_000), (999_999, 70, 1_000)])])
    sampler = MemorySampler(me, cuda_visible_devices="0", nvml=nvml)
    sampler._open()
    first = sampler.sample_once()
    assert first.process_util_pct == 12 and first.gpu_util_pct == 50 and first.util_source == "process"
    assert sampler.sample_once().process_util_pct == 12  # no newer NVML sample: the last one holds


def test_the_sampler_falls_back_to_the_whole_gpu_where_per_process_utilisation_is_unsupported():
    nvml = FakeNvml([fake_gpu(0)])
    sampler = MemorySampler(os.getpid(), cuda_visible_devices="0", nvml=nvml)
    sampler._open()
    first, second = sampler.sample_once(), sampler.sample_once()
    assert first.process_util_pct is None and first.util_source == "device" and second.util_pct == 50
    assert nvml.calls["process_utilization"] == 1  # unsupported: asked once
