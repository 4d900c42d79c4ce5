from collections import Counter

import pytest

import tasks.reasoning_gym as rg_task
from tasks import load_task, task_problems
from tasks.reasoning_gym import split_counts
from tasks.safe_eval import symbolic_expression_problem

needs_package = pytest.mark.skipif(
    not rg_task.installed(), reason="reasoning-gym not installed (extra 'reasoning')"
)

NAMED_IN_ISSUE = [
    "syllogism",
    "number_filtering",
    "string_insertion",
    "family_relationships",
    "maze",
    "base_conversion",
]


@needs_package
def test_mix_follows_weights_and_eval_only_datasets():
    task = load_task(
        "reasoning_gym",
        {
            "datasets": {"syllogism": 3.0, "string_insertion": 1.0},
            "eval_datasets": ["syllogism", "maze", "base_conversion"],
            "num_samples": 20,
            "num_eval": 9,
        },
    )
    assert Counter(task.train["rg_dataset"]) == {"syllogism": 15, "string_insertion": 5}
    assert Counter(task.eval["rg_dataset"]) == {"syllogism": 3, "maze": 3, "base_conversion": 3}
    assert len(set(task.train["rg_dataset"][:10])) == 2  # shuffled, not one dataset then the other


def test_split_counts_sum_to_total():
    assert split_counts({"a": 1.0, "b": 1.0, "c": 1.0}, 10) == {"a": 4, "b": 3, "c": 3}
    assert split_counts({"a": 1.0, "b": 0.0}, 5) == {"a": 5}


@needs_package
def test_same_seed_same_data_other_seed_other_data():
    args = {"datasets": ["syllogism", "base_conversion"], "num_samples": 8, "num_eval": 4}
    a, b, c = (load_task("reasoning_gym", args, seed=s) for s in (1, 1, 2))
    assert a.train.to_dict() == b.train.to_dict() and a.eval.to_dict() == b.eval.to_dict()
    assert a.train["prompt"] != c.train["prompt"]
    assert not {str(p) for p in a.train["prompt"]} & {str(p) for p in a.eval["prompt"]}  # eval is held out


@needs_package
def test_reasoning_gyms_scorer_gives_oracle_answers_full_marks():
    task = load_task(
        "reasoning_gym",
        {"datasets": NAMED_IN_ISSUE, "num_samples": 12, "num_eval": 6, "rewards": {"accuracy": 1.0}},
    )
    accuracy = task.rewards["accuracy"][0]
    columns = task.train.to_dict()
    tagged = [f"<answer>{a}</answer>" for a in columns["answer"]]
    assert accuracy(completions=tagged, **columns) == [1.0] * 12
    relaxed = load_task(
        "reasoning_gym",
        {"datasets": NAMED_IN_ISSUE, "num_samples": 12, "num_eval": 6, "require_tags": False},
    )
    last_line = [f"thinking...\n{a}" for a in columns["answer"]]  # no tags: the last line is the answer
    assert relaxed.rewards["accuracy"][0](completions=last_line, **columns) == [1.0] * 12
    assert all(task.is_correct(f"<answer>{row['answer']}</answer>", row) for row in task.eval)
    assert not any(task.is_correct("<answer>nonsense</answer>", row) for row in task.eval)


@needs_package
def test_scorers_that_eval_the_answer_are_guarded():
    # string_insertion's own scorer eval()s the answer; a list of characters earns its 0.1 partial credit.
    task = load_task("reasoning_gym", {"datasets": ["string_insertion"], "num_samples": 1, "num_eval": 0})
    row = task.train.to_dict()
    accuracy = task.rewards["accuracy"][0]
    as_list = f"<answer>{list(row['answer'][0])}</answer>"
    assert accuracy(completions=[as_list], **row) == [0.1]
    code = "<answer>__import__('os').system('echo pwned')</answer>"
    assert accuracy(
        completions=[code, "<answer>9**9**9**9</answer>"], **{k: v * 2 for k, v in row.items()}
    ) == [0.0, 0.0]
    import reasoning_gym.algorithmic.string_insertion as module

    assert "eval" not in vars(module)  # the guard is removed after scoring


@needs_package
@pytest.mark.parametrize("name", ["simple_integration", "polynomial_multiplication", "puzzle24"])
def test_scorers_that_parse_with_sympy_see_only_small_expressions(name):
    # Their scorers pass the answer to sympy.parse_expr: it eval()s, and sympy computes 9**9**9**9 exactly.
    task = load_task("reasoning_gym", {"datasets": [name], "num_samples": 2, "num_eval": 0})
    columns = task.train.to_dict()
    accuracy = task.rewards["accuracy"][0]
    oracle = [f"<answer>{a}</answer>" for a in columns["answer"]]
    if name != "puzzle24":  # puzzle24's oracle answer field is not an expression; it checks any solution
        assert accuracy(completions=oracle, **columns) == [1.0, 1.0]
    bombs = ["<answer>9**9**9**9</answer>", "<answer>__import__('os').getcwd()</answer>"]
    assert max(accuracy(completions=bombs, **columns)) < 0.1


@pytest.mark.parametrize(
    ("text", "allowed"),
    [
        ("x**2 + 3*x - C", True),
        ("2*x**(3/2)/3 + C", True),
        ("sin(x)*exp(-x)", True),
        ("9**9**9**9", False),
        ("x**100", False),
        ("(x**2)**40", False),
        ("__import__('os')", False),
        ("open", False),
        ("x.real", False),
        ("1" * 20, False),
        ("x ^ 2", False),
    ],
)
def test_symbolic_expression_gate(text, allowed):
    assert (symbolic_expression_problem(text) is None) == allowed


@needs_package
def test_settings_are_validated():
    problems = task_problems(
        "reasoning_gym",
        {"datasets": {"sylogism": 1.0}, "eval_datasets": ["maze"], "dataset_args": {"maze": {"bogus": 1}}},
    )
    assert any(
        p.startswith("task_args.datasets.sylogism: unknown reasoning-gym dataset; did you mean 'syllogism'")
        for p in problems
    )
    assert any(
        p.startswith("task_args.dataset_args.maze: {'bogus': 1} is not a valid config") for p in problems
    )
    assert task_problems("reasoning_gym", {"datasets": {"maze": 0}}) == [
        "task_args.datasets: every weight is 0; give one dataset a weight > 0"
    ]


def test_missing_package_names_the_extra(monkeypatch):
    # Simulates a venv without the optional package (it is installed here).
    monkeypatch.setattr(rg_task, "installed", lambda: False)
    assert task_problems("reasoning_gym", {}) == [f"task: {rg_task.INSTALL_HINT}"]
    assert "pip install 'rlsweep[reasoning]'" in rg_task.INSTALL_HINT
    with pytest.raises(ModuleNotFoundError, match=r"rlsweep\[reasoning\]"):
        rg_task.build_reasoning_gym(num_samples=1)
