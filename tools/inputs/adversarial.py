"""Completions a reward must survive: what a model (or an adversary) may write. Shared by the reward
tests and bench/cost/rewards.py."""

# Texts every reward must score in [0, 1] without raising.
ADVERSARIAL = [
    "",
    "   \n\t ",
    None,
    "None",
    "9**9**9**9",
    "<answer>9**9**9**9</answer>",
    "<answer>(9**9)**(9**9)</answer>",
    "<answer>" + "(" * 10_000 + "1" + ")" * 10_000 + "</answer>",
    "(" * 10_000 + "1 + 2" + ")" * 10_000,
    "[" * 10_000 + "]" * 10_000,
    "<answer>" + "9" * 5000 + "</answer>",
    "9" * 100_000,
    "x" * 100_000,
    "<think>" * 20_000 + "</answer>" * 2_000,
    "+" * 100_000,
    "1+" * 50_000 + "1",
    "<answer>__import__('os').system('echo pwned')</answer>",
    "<answer>['a'] * 10**9</answer>",
    "<answer>\u0664\u0662</answer>",  # Arabic-Indic digits
    "\u0661\u0662 + \u0663",
    "\x00\x01\udcff",
    "<answer></answer>",
    "<answer>1/0</answer>",
    "#### 42",
]

# Short answers whose cost explodes in reasoning-gym scorers (x stands for the problem's variable):
# sympy's simplify() of their derivative in simple_integration / intermediate_integration runs for
# tens of seconds to minutes.
POWER_PRODUCT = "(x+1)**64*(x+2)**64*(x+3)**64*(x+4)**64*(x+5)**63"  # 49 characters
NESTED_LOG = "log(" * 64 + "x" + ")" * 64  # 321 characters


def negations(variable: str, count: int = 2000) -> str:
    """`count` negations of a variable: propositional_logic's parser takes seconds on 2,000."""
    return "¬" * count + variable
