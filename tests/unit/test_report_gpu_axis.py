"""The answer's GPU axis: the frontier and the matrices per GPU count and strategy, and the
fewest GPUs each configuration fits on."""

import pandas as pd

from orchestrator.views.report import frontier
from orchestrator.views.report._feasibility import feasibility_matrix
from orchestrator.views.report._feasibility_tables import frontier_view, matrix_views


def row(k, n, distributed, status, peak):
    return {
        "trial_key": f"k{k}-{n}{distributed}",
        "stack": "trl",
        "mode": "grpo",
        "model": "random:Qwen/Qwen2.5-14B-Instruct",
        "quantization": "nf4",
        "num_generations": k,
        "batch_size": 1,
        "micro_batch_size": None,
        "max_prompt_length": 256,
        "max_completion_length": 512,
        "lora_r": 16,
        "status": status,
        "status_detail": "CUDA out of memory" if status == "oom" else "",
        "peak_device_gib": peak,
        "peak_rss_gib": None,
        "num_processes": n,
        "distributed": distributed,
    }


def trials() -> pd.DataFrame:
    return pd.DataFrame(
        [
            row(4, 1, "none", "completed", 20.5),
            row(8, 1, "none", "oom", 23.9),
            row(4, 2, "zero3", "completed", 12.25),
            row(8, 2, "zero3", "completed", 18.0),
        ]
    )


def test_the_frontier_has_a_row_per_gpu_count_and_strategy():
    df = frontier(trials(), budget_gib=24.0)
    by_gpus = {(r.num_processes, r.distributed): r for r in df.itertuples()}
    assert sorted(by_gpus) == [(1, "none"), (2, "zero3")]
    assert by_gpus[1, "none"].largest_fit == "K=4 B=1 (4 completions/step)"
    assert by_gpus[1, "none"].smallest_oom == "K=8 B=1 (8 completions/step)"
    assert by_gpus[2, "zero3"].largest_fit == "K=8 B=1 (8 completions/step)"
    assert by_gpus[2, "zero3"].fit_peak_device_gib == 18.0
    view = frontier_view(df)
    assert list(view["GPUs"]) == ["1 GPU", "2 GPUs · zero3"]


def test_the_matrix_shows_a_column_per_gpu_count_and_says_the_fewest_gpus_each_configuration_fits_on():
    (view,) = matrix_views(feasibility_matrix(trials(), budget_gib=24.0))
    assert list(view.table.columns) == ["K × B", "grpo · trl · 1 GPU", "grpo · trl · 2 GPUs · zero3"]
    assert view.caption.endswith(
        "Fewest GPUs that fit: grpo · trl: K=4 B=1 needs 1 GPU; K=8 B=1 needs 2 GPUs · zero3."
    )


def test_a_table_from_before_the_gpu_axis_reads_as_one_gpu_without_a_gpus_column():
    old = trials().drop(columns=["num_processes", "distributed"]).iloc[:2]
    df = frontier(old, budget_gib=24.0)
    assert list(zip(df.num_processes, df.distributed, strict=True)) == [(1, "none")]
    assert "GPUs" not in frontier_view(df).columns
    (view,) = matrix_views(feasibility_matrix(old, budget_gib=24.0))
    assert list(view.table.columns) == ["K × B", "grpo · trl"] and "Fewest GPUs" not in view.caption
