"""The optimizer's state allocated before the first step (trainers/optimizer_state.py): allocated as the
optimizer's own first step allocates it, and the training that follows bit for bit what it would have been."""

from types import SimpleNamespace

import pytest
import torch

from trainers.optimizer_state import materialize, state_gib


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    model[0].bias.requires_grad_(False)  # a frozen weight gets no state
    return model


class Wrapped:
    """accelerate's AcceleratedOptimizer in the one respect that matters here: the torch optimizer is
    `.optimizer`."""

    def __init__(self, optimizer):
        self.optimizer = optimizer


def _train(model, optimizer, steps: int = 3) -> list[torch.Tensor]:
    torch.manual_seed(1)
    for _ in range(steps):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return [p.detach().clone() for p in model.parameters()]


def _trainable(model):
    return [p for p in model.parameters() if p.requires_grad]


@pytest.mark.parametrize("fused", [False, True])
def test_training_after_the_state_is_materialized_is_bit_for_bit_training_without(fused):
    # Weight decay and a real learning rate: the materializing step must leave both untouched.
    plain, primed = _model(), _model()
    settings = dict(lr=1e-2, weight_decay=0.1, fused=fused)
    reference = _train(plain, torch.optim.AdamW(plain.parameters(), **settings))
    optimizer = torch.optim.AdamW(primed.parameters(), **settings)
    before = [p.detach().clone() for p in primed.parameters()]

    assert materialize(SimpleNamespace(optimizer=Wrapped(optimizer))) is True

    assert all(torch.equal(a, b) for a, b in zip(primed.parameters(), before, strict=True))
    assert all(p.grad is None for p in primed.parameters())  # no gradient left behind for backward to add to
    assert optimizer.param_groups[0]["lr"] == 1e-2
    trained = _train(primed, optimizer)
    assert all(torch.equal(a, b) for a, b in zip(trained, reference, strict=True))


def test_the_state_is_allocated_before_the_first_step_as_the_first_step_allocates_it():
    model = _model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    trainer = SimpleNamespace(optimizer=optimizer)
    assert state_gib(trainer) == 0

    materialize(trainer)

    primed = {name: tuple(v.shape) for p in _trainable(model) for name, v in optimizer.state[p].items()}
    assert set(optimizer.state) == set(_trainable(model))
    assert all(float(v.abs().sum()) == 0 for s in optimizer.state.values() for v in s.values())
    moments = sum(2 * p.numel() * p.element_size() for p in _trainable(model))
    steps = sum(s["step"].numel() * s["step"].element_size() for s in optimizer.state.values())
    assert state_gib(trainer) * 2**30 == pytest.approx(moments + steps)
    # A real first step on a fresh optimizer allocates the same tensors.
    fresh_model = _model()
    fresh = torch.optim.Adam(fresh_model.parameters(), lr=1e-3)
    _train(fresh_model, fresh, steps=1)
    assert primed == {
        name: tuple(v.shape) for p in _trainable(fresh_model) for name, v in fresh.state[p].items()
    }


def test_nothing_is_done_where_the_state_exists_or_a_fresh_state_is_not_zeros():
    model = _model()
    adam = torch.optim.AdamW(model.parameters(), lr=1e-3)
    _train(model, adam, steps=1)
    moments = [v.clone() for s in adam.state.values() for v in s.values()]
    assert materialize(SimpleNamespace(optimizer=adam)) is False  # after a step: left as it is
    after = [v for s in adam.state.values() for v in s.values()]
    assert all(torch.equal(a, b) for a, b in zip(moments, after, strict=True))

    adagrad = torch.optim.Adagrad(_model().parameters(), lr=1e-3, initial_accumulator_value=0.5)
    assert materialize(SimpleNamespace(optimizer=adagrad)) is False
    assert len(adagrad.state) == 0 or all(float(s["sum"].min()) == 0.5 for s in adagrad.state.values())
    assert materialize(SimpleNamespace(optimizer=None)) is False
    assert state_gib(SimpleNamespace()) is None
