"""The report's vLLM share section: what share to give vLLM, from the measured peaks and tokens/s."""

import json

import pandas as pd

from orchestrator.views.report._vllm import share_answers, share_table


def _trials(rows):
    trials = pd.DataFrame(
        [
            {"trial_key": key, "stack": "trl", "status": status,
             "config": json.dumps({"num_generations": 8, "generation": generation,
                                   "vllm_gpu_memory_utilization": share})}
            for key, generation, share, status, _, _ in rows
        ]
    )  # fmt: skip
    summary = pd.DataFrame(
        [{"run_name": key, "peak_device_gib": peak, "peak_rss_gib": None, "median_tokens_per_s": tps}
         for key, _, _, _, peak, tps in rows]
    )  # fmt: skip
    return trials, summary


ROWS = [
    ("v5", "vllm", 0.5, "completed", 15.0, 900.0),
    ("t", "transformers", 0.5, "completed", 9.0, 300.0),
    ("v2", "vllm", 0.2, "oom", 16.0, None),
    ("v3", "vllm", 0.3, "completed", 11.0, 900.0),
    ("v25", "vllm", 0.25, "completed", 12.0, 800.0),
]


def test_the_table_lists_transformers_then_each_share_with_its_peak_and_tokens_per_s():
    table = share_table(*_trials(ROWS))
    assert table.values.tolist() == [
        ["trl", 8, "transformers", None, "completed", 9.0, 300.0],
        ["trl", 8, "vllm", "0.2", "oom", 16.0, None],
        ["trl", 8, "vllm", "0.25", "completed", 12.0, 800.0],
        ["trl", 8, "vllm", "0.3", "completed", 11.0, 900.0],
        ["trl", 8, "vllm", "0.5", "completed", 15.0, 900.0],
    ]


def test_the_answer_is_the_fastest_share_that_fit_smaller_on_a_tie_and_the_smallest_that_completed():
    table = share_table(*_trials(ROWS))
    # 0.3 and 0.5 both reach 900 tokens/s: 0.3 is the smaller; 900 / 300 = 3.00x transformers
    assert share_answers(table, budget_gib=16.0) == [
        "trl, K 8: give vLLM 0.3 (900 tokens/s, peak 11.00 GiB, 3.00x transformers' tokens/s); the smallest "
        "share that completed: 0.25."
    ]
    # a 12 GiB budget: the 0.5 trial's 15 GiB peak does not fit, the answer is unchanged; at 10 none fits
    # (0.25 is written as the sweep wrote it, not rounded to the table's one decimal)
    assert share_answers(table, budget_gib=12.0)[0].startswith("trl, K 8: give vLLM 0.3 ")
    assert share_answers(table, budget_gib=10.0) == [
        "trl, K 8: no vLLM share completed; keep transformers generation or a larger budget."
    ]


def test_a_sweep_without_vllm_trials_has_no_share_section():
    assert share_table(*_trials([("t", "transformers", 0.5, "completed", 9.0, 300.0)])).empty
