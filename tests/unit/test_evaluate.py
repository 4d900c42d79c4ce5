"""Held-out evaluation (trainers/evaluate.py) on the tiny model: prompts generated in batches, each
prompt's k samples judged against that prompt's own row."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tasks import load_task
from trainers import evaluate


@pytest.fixture(scope="module")
def model_and_tokenizer():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainers.models import resolve_model

    path = resolve_model("tiny")
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def test_batched_evaluation_judges_each_prompts_k_samples_against_its_own_row(
    model_and_tokenizer, monkeypatch
):
    model, tokenizer = model_and_tokenizer
    monkeypatch.setattr(evaluate, "EVAL_BATCH_PROMPTS", 3)  # 7 prompts: batches of 3, 3 and 1
    task = load_task("arithmetic", {"num_samples": 4, "num_eval": 7}, seed=0)
    judged: list[tuple[str, str]] = []
    # Correct exactly for the first eval prompt's row: pass@1 must then be 1/7 whatever the texts say.
    first = task.eval[0]["answer"]

    def is_correct(text: str, row: dict) -> bool:
        judged.append((text, row["answer"]))
        return row["answer"] == first and sum(1 for _, a in judged if a == first) <= 2

    task.is_correct = is_correct
    evaluator = evaluate.Evaluator(
        task, tokenizer, every=1, at_end=False, samples=7, k=2, max_new_tokens=4, temperature=1.0
    )
    side = tokenizer.padding_side
    figures = evaluator.run(SimpleNamespace(model=model))
    assert figures["eval_prompts"] == 7 and figures["eval_k"] == 2
    assert [a for _, a in judged] == [row["answer"] for row in task.eval.select(range(7)) for _ in range(2)]
    assert figures["eval_pass_at_1"] == pytest.approx(1 / 7) and figures["eval_pass_at_k"] == pytest.approx(
        1 / 7
    )
    assert tokenizer.padding_side == side  # generation pads on the left; the trainer's side is restored
    assert model.training is False  # it was not training before, and is left so
