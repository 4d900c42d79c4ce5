"""A hostile policy for a real trial (tests/integration/test_code_trial.py): on a PYTHONPATH with
RLSWEEP_TEST_HOSTILE_CODES set (a JSON list of code), every process that starts (the trainer child)
makes the code task's rewards see the completions of their n-th call (a step's batch: TRL calls each
reward once a step) as the fenced codes n * batch, n * batch + 1, ... (cycling), whatever the model
wrote. Generation, TRL's reward calls, the sandbox and the step records stay real."""

import json
import os

_CODES = os.environ.get("RLSWEEP_TEST_HOSTILE_CODES")

if _CODES:
    import tasks.code

    _codes = json.loads(_CODES)
    _reward = tasks.code._reward

    def _hostile_reward(grader, name, counts):
        reward = _reward(grader, name, counts)
        calls = []

        def hostile(prompts=None, completions=None, **columns):
            start = len(calls) * len(completions or [])
            calls.append(1)
            texts = [
                f"```python\n{_codes[(start + i) % len(_codes)]}```" for i in range(len(completions or []))
            ]
            return reward(prompts=prompts, completions=texts, **columns)

        hostile.__name__ = hostile.__qualname__ = name
        return hostile

    tasks.code._reward = _hostile_reward
