"""The allocation counter of simulated steps (trainers/simulate/_count.py): every storage an op makes is
live, rounded to CUDA's 512-byte granule, until its last reference dies; on meta as on real tensors."""

import pytest
import torch

from trainers.simulate._count import GRANULE, AllocationCounter, rounded


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_a_forward_and_backward_count_what_they_hold_and_free_what_they_drop(device):
    layer = torch.nn.Linear(256, 1024, device=device)
    x = torch.empty(32, 256, device=device)
    with AllocationCounter() as counter:
        counter.hold(layer.parameters())
        weights = counter.live_bytes
        assert weights == rounded(256 * 1024 * 4) + rounded(1024 * 4)
        counter.phase("forward")
        y = layer(x)
        assert counter.live_bytes == weights + rounded(32 * 1024 * 4)
        y.sum().backward()
        del y
        layer.weight.grad = layer.bias.grad = None
    assert counter.live_bytes == weights  # the output and the gradients are gone
    assert counter.peak_bytes > weights and counter.phase_peaks["forward"] == counter.peak_bytes


def test_a_view_is_the_same_storage_and_sizes_round_up_to_the_granule():
    with AllocationCounter() as counter:
        t = torch.empty(3, device="meta")  # 12 bytes: one granule
        view = t.view(1, 3)
        assert counter.live_bytes == GRANULE
        del t, view
    assert counter.live_bytes == 0
