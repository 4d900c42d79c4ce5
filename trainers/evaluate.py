"""Held-out accuracy during training: pass@1 and pass@k from k samples per prompt."""

from __future__ import annotations

import time

import torch

from tasks.base import Task
from trainers.runtime import encode_prompts

# Held-out prompts generated together: a decode step on a small model costs about the same for 1 or 32.
EVAL_BATCH_PROMPTS = 32


class Evaluator:
    def __init__(
        self,
        task: Task,
        tokenizer,
        *,
        every: int,
        at_end: bool,
        samples: int,
        k: int,
        max_new_tokens: int,
        temperature: float,
    ):
        self.rows = [task.eval[i] for i in range(min(samples, len(task.eval)))]
        self.is_correct = task.is_correct
        self.tokenizer = tokenizer
        self.every, self.at_end, self.k = every, at_end, k
        self.max_new_tokens, self.temperature = max_new_tokens, temperature

    @classmethod
    def for_trial(cls, task: Task, tokenizer, spec) -> Evaluator | None:
        """The evaluator a trial asked for (eval_every / eval_at_end), or None."""
        if task.eval is None or not (spec.eval_every or spec.eval_at_end):
            return None
        return cls(
            task,
            tokenizer,
            every=spec.eval_every,
            at_end=spec.eval_at_end,
            samples=spec.eval_samples,
            k=spec.eval_k,
            max_new_tokens=spec.max_completion_length,
            temperature=spec.temperature,
        )

    def due(self, step: int, max_steps: int) -> bool:
        return bool(self.rows) and (
            (self.every and step % self.every == 0) or (self.at_end and step == max_steps)
        )

    @torch.no_grad()
    def run(self, trainer) -> dict[str, float]:
        """Held-out accuracy of the trainer's model now: the prompts in batches of EVAL_BATCH_PROMPTS
        (left-padded, k samples each), so a decode step serves every prompt of a batch at once."""
        model = trainer.model
        was_training = model.training
        model.eval()
        start = time.perf_counter()
        correct_per_prompt: list[list[bool]] = []
        side = self.tokenizer.padding_side
        self.tokenizer.padding_side = "left"  # generation continues each prompt from its last token
        try:
            for first in range(0, len(self.rows), EVAL_BATCH_PROMPTS):
                rows = self.rows[first : first + EVAL_BATCH_PROMPTS]
                ids = encode_prompts(self.tokenizer, [row["prompt"] for row in rows])
                ids = {k: v.to(model.device) for k, v in ids.items()}
                out = model.generate(
                    **ids,
                    do_sample=True,
                    temperature=self.temperature,
                    top_p=1.0,
                    top_k=0,
                    max_new_tokens=self.max_new_tokens,
                    num_return_sequences=self.k,
                    pad_token_id=self.tokenizer.pad_token_id,
                )
                texts = self.tokenizer.batch_decode(
                    out[:, ids["input_ids"].shape[1] :], skip_special_tokens=True
                )
                for i, row in enumerate(rows):  # generate returns each prompt's k samples together
                    samples = texts[i * self.k : (i + 1) * self.k]
                    correct_per_prompt.append([_safe(self.is_correct, text, row) for text in samples])
        finally:
            self.tokenizer.padding_side = side
            if was_training:
                model.train()
        n = len(correct_per_prompt)
        result = {
            # pass@1 estimated from all k samples (unbiased: mean correctness); pass@k: any of k correct.
            "eval_pass_at_1": sum(sum(c) / len(c) for c in correct_per_prompt) / n,
            "eval_prompts": n,
            "eval_s": time.perf_counter() - start,
        }
        result["eval_k"] = self.k
        result["eval_pass_at_k"] = sum(any(c) for c in correct_per_prompt) / n
        return result


def _safe(is_correct, text: str, row: dict) -> bool:
    try:
        return bool(is_correct(text, row))
    except Exception:
        return False
