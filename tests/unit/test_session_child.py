"""A probe session's trainer child (trainers/_session.py) on a test-only stack: the model is loaded once,
each shape ends its own event stream, an out-of-memory shape ends `oom` and the next one runs, and a
shape whose settings are another session's is refused by name."""

from __future__ import annotations

import json
import os

from tests.helpers.stacks import SHAPES, ShapeStack, registered
from trainers import _session
from trainers.events import read_events
from trainers.session import POISONED, READY, session_key
from trainers.trial import TrialSpec


def shape(tmp_path, name: str, **knobs) -> TrialSpec:
    spec = TrialSpec(**{"stack": "shapes", "model": "tiny", "max_steps": 1} | knobs)
    spec.events_path = str(tmp_path / name / "events.jsonl")
    spec.trial_key = name
    path = tmp_path / name / "spec.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(spec.to_dict()))
    return spec


def serve(tmp_path, first: TrialSpec, lines: list[str]) -> int:
    read, write = os.pipe()
    os.write(write, "".join(f"{line}\n" for line in lines).encode())
    os.close(write)
    try:
        return _session.serve(str(tmp_path / first.trial_key / "spec.json"), fd=read)
    finally:
        os.close(read)
        _session._held = None


def kinds(path) -> list[str]:
    return [e["event"] for e in read_events(path)[0]]


def test_a_session_loads_once_and_ends_each_shape_on_its_own_an_oom_shape_included(tmp_path):
    ShapeStack.loads = 0
    with registered(SHAPES):
        first = shape(tmp_path, "session")
        first.events_path = str(tmp_path / "session" / "stream.jsonl")
        (tmp_path / "session" / "spec.json").write_text(json.dumps(first.to_dict()))
        shapes = [shape(tmp_path, f"k{k}", num_generations=k) for k in (4, 64, 8)]
        code = serve(tmp_path, first, ["stop", *(str(tmp_path / s.trial_key / "spec.json") for s in shapes)])
    assert code == 0
    assert ShapeStack.loads == 1
    assert kinds(tmp_path / "k4" / "events.jsonl") == ["started", "finished"]
    assert kinds(tmp_path / "k64" / "events.jsonl") == ["oom"]
    assert kinds(tmp_path / "k8" / "events.jsonl") == ["started", "finished"]
    assert kinds(first.events_path) == [READY] * 4  # the start-up's, then one after each shape


def test_a_shape_of_another_model_is_refused_naming_the_shape_fields(tmp_path):
    with registered(SHAPES):
        first = shape(tmp_path, "session")
        first.events_path = str(tmp_path / "session" / "stream.jsonl")
        (tmp_path / "session" / "spec.json").write_text(json.dumps(first.to_dict()))
        shape(tmp_path, "other", model="smollm2")
        assert serve(tmp_path, first, [str(tmp_path / "other" / "spec.json")]) == 0
    (error,) = read_events(tmp_path / "other" / "events.jsonl")[0]
    assert error["event"] == "error" and "SHAPE_FIELDS" in error["message"], error


def test_shapes_share_a_session_key_exactly_when_only_their_shape_and_bookkeeping_differ():
    base = TrialSpec(model="tiny")
    assert session_key(base) == session_key(
        TrialSpec(model="tiny", num_generations=16, batch_size=2, max_completion_length=512, trial_key="x")
    )
    assert session_key(base) != session_key(TrialSpec(model="tiny", lora_r=32))
    assert session_key(base) != session_key(TrialSpec(model="tiny", stack="unsloth"))


def test_a_poisoned_context_ends_the_session_after_the_shape_that_poisoned_it(tmp_path, monkeypatch):
    released = iter([None, "AcceleratorError: CUDA error: an illegal memory access was encountered"])
    monkeypatch.setattr(_session, "release", lambda: next(released))
    with registered(SHAPES):
        first = shape(tmp_path, "session")
        first.events_path = str(tmp_path / "session" / "stream.jsonl")
        (tmp_path / "session" / "spec.json").write_text(json.dumps(first.to_dict()))
        shapes = [shape(tmp_path, f"k{k}", num_generations=k) for k in (4, 8)]
        code = serve(tmp_path, first, [str(tmp_path / s.trial_key / "spec.json") for s in shapes])
    assert code == 1
    assert kinds(first.events_path) == [READY, POISONED]
    assert kinds(tmp_path / "k4" / "events.jsonl") == ["started", "finished"]
    assert not (tmp_path / "k8" / "events.jsonl").exists()  # never started: the next session's
