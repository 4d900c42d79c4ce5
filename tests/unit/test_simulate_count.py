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


def _block_twice(keep: bool) -> AllocationCounter:
    """Two passes of one small block, forward and backward, on meta: the second pass repeats the first's
    ops on the same shapes. matmul of a 3-D input reshapes through `_unsafe_view`, which returns its
    input's storage although its schema declares no alias."""
    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.SiLU(), torch.nn.Linear(256, 64)).to(
        "meta"
    )
    norm = torch.nn.RMSNorm(64, device="meta")
    with AllocationCounter(trace=True, keep=keep) as counter:
        counter.hold(list(block.parameters()) + list(norm.parameters()))
        for _ in range(2):
            x = torch.empty(4, 16, 64, device="meta", requires_grad=True)
            counter.phase("forward")
            y = norm(block(x) * 2 + x)
            counter.phase("backward")
            y.pow(2).mean().backward()
            del x, y
    return counter


def test_outputs_kept_by_their_inputs_shapes_count_the_same_trace_and_peaks_as_every_op_run():
    kept, run = _block_twice(keep=True), _block_twice(keep=False)
    assert kept.reused > 0 and run.reused == 0  # the second pass was answered from the first's outputs
    assert [e[0] + str(e[2:]) for e in kept.trace] == [e[0] + str(e[2:]) for e in run.trace]
    assert (kept.peak_bytes, kept.phase_peaks, kept.live_bytes) == (
        run.peak_bytes,
        run.phase_peaks,
        run.live_bytes,
    )


def test_an_op_that_returns_its_inputs_storage_is_never_answered_from_kept_outputs():
    weight = torch.empty(64, 64, device="meta")
    with AllocationCounter() as counter:
        x = torch.empty(4, 16, 64, device="meta")
        for _ in range(3):
            y = x @ weight  # mm on a view, then _unsafe_view of the product: one new storage each
            assert counter.live_bytes == rounded(4 * 16 * 64 * 4) * 2
            del y
    assert torch.ops.aten._unsafe_view.default not in counter._kept_ops()


def test_real_tensors_are_never_answered_from_kept_outputs():
    layer = torch.nn.Linear(8, 8)
    with AllocationCounter() as counter:
        for _ in range(3):
            layer(torch.ones(2, 8)).sum().backward()
    assert counter.reused == 0


def test_an_op_in_place_is_answered_with_its_tensor_and_one_that_moves_its_view_or_storage_always_runs():
    with AllocationCounter() as counter:
        x = torch.empty(4, 8, device="meta")
        for _ in range(3):
            assert x.mul_(2) is x and x.shape == (4, 8)
        y = torch.empty(4, 8, device="meta")
        for _ in range(2):
            y.t_()  # in place, but the view changes: run each time
        assert y.shape == (4, 8) and y.stride() == (8, 1)
        a, b = torch.empty(4, 8, device="meta"), torch.empty(4, 8, device="meta")
        for source in (a, b):  # the same shapes, another storage each time
            x.set_(source)
            assert x.untyped_storage()._cdata == source.untyped_storage()._cdata
    assert counter.reused >= 2
    assert torch.ops.aten.mul_.Tensor in counter._kept_ops()
    assert not {torch.ops.aten.t_.default, torch.ops.aten.set_.source_Tensor} & counter._kept_ops()
