"""Several ranks' memory read as one trial's (orchestrator/running/ranks.py RankSamplers)."""

import json

from orchestrator.running.ranks import combine_ranks, rank_sampler_factory
from orchestrator.words.settings import GuardSettings


def test_a_step_row_holds_each_ranks_peak_and_their_max_with_power_summed():
    rank0 = {"device_peak_gib": 10.5, "rss_peak_gib": 2.0, "device_used_gib": 9.0, "rss_gib": 1.5,
             "power_w": 300.0, "energy_j": 600.0, "gpu_util_pct": 90.0, "samples": 4}  # fmt: skip
    rank1 = {"device_peak_gib": 12.25, "rss_peak_gib": 1.75, "device_used_gib": 11.0, "rss_gib": 1.25,
             "power_w": 250.0, "energy_j": 500.0, "gpu_util_pct": 70.0, "samples": 3}  # fmt: skip
    row = combine_ranks([rank0, rank1], "device_peak_gib", "rss_peak_gib")
    assert row == {
        "device_used_gib": 11.0,
        "device_peak_gib": 12.25,
        "rss_gib": 1.5,
        "rss_peak_gib": 2.0,
        "rank_device_peak_gib": json.dumps([10.5, 12.25]),
        "rank_rss_peak_gib": json.dumps([2.0, 1.75]),
        "gpu_util_pct": 80.0,
        "gen_util_pct": None,
        "train_util_pct": None,
        "gpu_util_source": None,
        "power_w": 550.0,
        "energy_j": 1100.0,
        "samples": 7,
    }


def test_a_rank_not_sampled_is_null_in_the_lists_never_zero():
    row = combine_ranks(
        [{"rss_peak_gib": 1.0, "device_peak_gib": None}, None], "device_peak_gib", "rss_peak_gib"
    )
    assert row["rank_rss_peak_gib"] == "[1.0, null]"
    assert row["rank_device_peak_gib"] is None and row["device_peak_gib"] is None


class FakeSampler:
    def __init__(self, pid, **kwargs):
        self.pid, self.kwargs = pid, kwargs

    def start(self):
        return self


def test_each_rank_is_sampled_on_its_own_gpu_and_the_guard_names_the_rank(monkeypatch):
    import orchestrator.running.ranks as ranks

    monkeypatch.setattr(ranks, "MemorySampler", FakeSampler)
    said = []
    factory = rank_sampler_factory(GuardSettings(budget_gib=24.0), "3,5", ranks=2)
    samplers = factory(100, on_exceed=said.append)
    samplers.add(1, 4242)
    samplers.add(0, 4241)
    assert {r: (s.pid, s.kwargs["cuda_visible_devices"]) for r, s in samplers.samplers.items()} == {
        0: (4241, "3"),
        1: (4242, "5"),
    }
    assert samplers.samplers[1].kwargs["budget_gib"] == 24.0

    class Breach:
        detail = "guard: GPU process memory 24.50 GiB passed budget 24.00 GiB (+0.00 GiB margin)"

    samplers.samplers[1].kwargs["on_budget_exceeded"](Breach())
    assert said == ["rank 1: guard: GPU process memory 24.50 GiB passed budget 24.00 GiB (+0.00 GiB margin)"]
