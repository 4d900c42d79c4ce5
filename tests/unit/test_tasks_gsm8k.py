import json

import pytest

from tasks import load_task, task_problems
from tasks.gsm8k import last_integer, parse_answer


def write_jsonl(path, n, offset=0):
    rows = [
        {
            "question": f"Tom has {i} apples and buys {i + 1}. How many?",
            "answer": f"{i}+{i + 1}={2 * i + 1}\n#### {2 * i + 1:,}",
        }
        for i in range(offset, offset + n)
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)


def test_local_jsonl_splits_train_and_held_out(tmp_path):
    path = write_jsonl(tmp_path / "g.jsonl", 20, offset=600)
    task = load_task("gsm8k", {"path": path, "num_eval": 5})
    assert (len(task.train), len(task.eval)) == (15, 5)
    assert not set(task.train["answer"]) & set(task.eval["answer"])
    row = task.train[0]
    assert row["prompt"][-1]["content"].startswith("Tom has")
    assert task.is_correct(f"<answer>{row['answer']:,}</answer>", row)  # thousands separator
    assert task.rewards["accuracy"][0](
        completions=[f"<answer>{row['answer']}</answer>"], answer=[row["answer"]]
    ) == [1.0]


def test_eval_path_and_num_samples(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", 10)
    held_out = write_jsonl(tmp_path / "test.jsonl", 4, offset=100)
    task = load_task("gsm8k", {"path": train, "eval_path": held_out, "num_samples": 6, "num_eval": 3})
    assert (len(task.train), len(task.eval)) == (6, 3)
    assert set(task.eval["answer"]) <= {2 * i + 1 for i in range(100, 104)}


def test_same_seed_same_data_other_seed_other_order(tmp_path):
    path = write_jsonl(tmp_path / "g.jsonl", 30)
    a, b, c = (load_task("gsm8k", {"path": path, "num_eval": 5}, seed=s) for s in (1, 1, 2))
    assert a.train.to_dict() == b.train.to_dict() and a.eval.to_dict() == b.eval.to_dict()
    assert a.train["answer"] != c.train["answer"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The answer is 42.", 42),
        ("first 7, then 42", 42),
        ("<answer>1,250</answer>", 1250),
        ("$18.00 in total", 18),
        ("18.5", None),
        ("-3 degrees", -3),
        ("no numbers", None),
        ("\u0664\u0662", None),  # unicode digits are not the ASCII answer
        ("", None),
    ],
)
def test_last_integer(text, expected):
    assert last_integer(text) == expected


def test_bad_files_name_the_line_and_the_fix(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "#### 3"}\n{"question": "q", "answer": "no final"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: .*'#### N'"):
        load_task("gsm8k", {"path": str(bad), "num_eval": 1})
    problems = task_problems("gsm8k", {"path": str(tmp_path / "missing.jsonl")})
    assert problems == [
        f"task_args.path: {str(tmp_path / 'missing.jsonl')!r} is not a file; give a JSONL file of question/answer rows"
    ]
    assert parse_answer("a\n#### 1,000") == 1000


def test_hub_failure_says_to_use_a_local_file(monkeypatch):
    # No hub here: the real load_dataset is replaced by what an offline machine raises.
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ValueError, match="openai/gsm8k .*set task_args.path to a local JSONL"):
        load_task("gsm8k", {})
