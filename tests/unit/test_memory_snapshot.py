"""bench/gpu/memory_snapshot.py: the blocks live at the peak of a torch memory snapshot's history."""

from bench.gpu.memory_snapshot import at_peak, summary

GIB = 2**30
WEIGHTS = {"filename": "/site/trainers/models.py", "line": 10, "name": "load"}
LOGITS = {"filename": "/site/trl/trainer/grpo_trainer.py", "line": 99, "name": "_get_per_token_logps"}
LINEAR = {"filename": "/site/torch/nn/functional.py", "line": 5, "name": "linear"}


def snapshot() -> dict:
    """Weights (2 GiB, allocated before the history), then logits of 3 GiB allocated and freed, then
    a 1 GiB cache still live at the end: the peak is weights + logits, 5 GiB."""
    return {
        "segments": [
            {
                "device": 0,
                "address": 0,
                "blocks": [
                    {"size": 2 * GIB, "state": "active_allocated", "frames": []},
                    {"size": 3 * GIB, "state": "inactive", "frames": []},
                    {"size": GIB, "state": "active_allocated", "frames": [WEIGHTS]},
                ],
            }
        ],
        "device_traces": [
            [
                {"action": "alloc", "addr": 2 * GIB, "size": 3 * GIB, "frames": [LINEAR, LOGITS]},
                {"action": "free_requested", "addr": 2 * GIB, "size": 3 * GIB, "frames": [LINEAR, LOGITS]},
                {"action": "free_completed", "addr": 2 * GIB, "size": 3 * GIB, "frames": [LINEAR, LOGITS]},
                {"action": "alloc", "addr": 5 * GIB, "size": GIB, "frames": [WEIGHTS]},
            ]
        ],
    }


def test_the_peak_is_the_largest_total_the_history_passes_through():
    peak, index, live = at_peak(snapshot())
    assert peak == 5 * GIB
    assert index == 2  # before the logits' free completed
    assert sorted(size for size, _ in live.values()) == [2 * GIB, 3 * GIB]


def test_the_summary_names_the_frame_outside_torch_that_allocated_each_block():
    text = summary(snapshot())
    assert "peak allocated 5.000 GiB in 2 blocks" in text
    assert "grpo_trainer.py:99 _get_per_token_logps" in text
    by_owner = text.split("by the innermost frame outside torch:")[1]
    assert by_owner.index("_get_per_token_logps") < by_owner.index("allocated before the history began")


def test_a_snapshot_without_history_peaks_at_its_live_blocks():
    bare = snapshot()
    bare["device_traces"] = []
    peak, index, live = at_peak(bare)
    assert peak == 3 * GIB and index == 0 and len(live) == 2


def test_the_snapshot_hook_waits_past_the_step_that_allocates_the_optimizer_state(monkeypatch):
    """The trainer's zero-rate step before step 1 (trainers/optimizer_state.py) is not the first step's end."""
    import importlib.util
    from pathlib import Path
    from types import SimpleNamespace

    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from trainers.optimizer_state import materialize

    monkeypatch.delenv("RLSWEEP_BENCH_SNAPSHOT", raising=False)
    path = Path(__file__).resolve().parents[2] / "bench" / "gpu" / "snapshot_hook" / "sitecustomize.py"
    spec = importlib.util.spec_from_file_location("snapshot_hook_sitecustomize", path)
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.AdamW([weight], lr=0.1)
    seen = []
    handle = register_optimizer_step_post_hook(lambda o, a, k: seen.append(hook._priming()))
    try:
        assert materialize(SimpleNamespace(optimizer=optimizer))
        weight.grad = torch.ones(2)
        optimizer.step()
    finally:
        handle.remove()
    assert seen == [True, False]
