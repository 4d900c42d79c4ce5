"""Figures and names in words: durations, and model names shortened to what tells them apart in a table."""

from orchestrator.words.text import duration, short_names


def test_a_duration_reads_in_seconds_minutes_or_hours():
    assert [duration(s) for s in (45, 200, 3900)] == ["45 s", "3 min 20 s", "1 h 05 min"]


def test_models_of_one_family_keep_only_what_tells_them_apart():
    names = ["random:Qwen/Qwen3-1.7B", "random:Qwen/Qwen3-4B", "smollm2"]
    assert short_names(names) == {
        "random:Qwen/Qwen3-1.7B": "Qwen3-1.7B",
        "random:Qwen/Qwen3-4B": "Qwen3-4B",
        "smollm2": "smollm2",
    }


def test_random_weights_beside_the_real_model_keep_their_scheme():
    assert short_names(["random:Qwen/Qwen3-4B", "Qwen/Qwen3-4B"]) == {
        "random:Qwen/Qwen3-4B": "random:Qwen3-4B",
        "Qwen/Qwen3-4B": "Qwen/Qwen3-4B",
    }


def test_the_same_model_name_under_two_orgs_keeps_its_org():
    names = ["org-a/Model-7B", "org-b/Model-7B", "org-a/Other-1B"]
    assert short_names(names) == {
        "org-a/Model-7B": "org-a/Model-7B",
        "org-b/Model-7B": "org-b/Model-7B",
        "org-a/Other-1B": "Other-1B",
    }


def test_short_names_are_unique_and_leave_out_what_is_not_text():
    names = ["M", "x/M", "y/x/M", "random:x/M", None, float("nan")]
    short = short_names(names)
    assert set(short) == {"M", "x/M", "y/x/M", "random:x/M"}
    assert len(set(short.values())) == len(short)
