"""Completions a reward must survive quickly: shared by the test_tasks_* files."""

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
