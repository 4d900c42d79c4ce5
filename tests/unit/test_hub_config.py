"""Any model by its config.json: a hub id that is not bundled is read from a local HF cache or its
config.json fetched alone from a hub on loopback (tests/helpers/fake_hub.py), a path to a config.json
or its folder is the model, and fits, fitmap and predict answer for it exactly what they answer for the
same config bundled. An unreachable hub, a gated model and an offline host are refused with exit 2 and
the command that fetches the config. A random twin is chosen by architecture and size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.cli import run_cli
from tests.helpers.fake_hub import FakeHub, bundled_as_published, closed_port_url, write_snapshot
from trainers.models import bundled_models, model_problems, nearest_twin

BUNDLED = "Qwen/Qwen2.5-3B-Instruct"
CLONE = "acme/Qwen2.5-3B-Clone"  # not bundled; served with the bundled model's config
FITS = ["--card", "16gb", "--k", "8", "--b", "2", "--length", "1024"]
# A qwen2 config of Qwen2.5-Math-7B's shape (28 layers x 3,584 hidden, 4 KV heads, 152,064 vocab),
# whose name reads like Qwen3-1.7B's more than like any Qwen2.5's.
MATH_7B = {
    **bundled_as_published("Qwen/Qwen2.5-7B-Instruct"),
    "max_position_embeddings": 4096,
    "rope_theta": 10000.0,
}


@pytest.fixture
def hub_env(tmp_path, monkeypatch):
    """An empty HF cache in tmp_path, the network allowed (huggingface_hub may have read HF_HUB_OFFLINE
    at its import): the hub cache's path."""
    import huggingface_hub.constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    return tmp_path / "hf" / "hub"


def _answers(text: str) -> list[str]:
    """Each stack's line of `rlsweep fits`."""
    return [line for line in text.splitlines() if line.startswith(("  TRL ", "  Unsloth "))]


def _fits(model: str, capsys) -> tuple[int, str]:
    return run_cli(["fits", "--model", model, *FITS], capsys)


def test_a_fetched_config_answers_fits_exactly_as_the_same_config_bundled(hub_env, monkeypatch, capsys):
    with FakeHub({CLONE: bundled_as_published(BUNDLED)}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        code, text = _fits(CLONE, capsys)
    assert code == 0, text
    cached = hub_env / "models--acme--Qwen2.5-3B-Clone" / "snapshots"
    (config,) = cached.glob("*/config.json")
    assert (
        f"{CLONE}: architecture (qwen2, 36 layers x 2048 hidden) read from its config.json, fetched from "
        in text
    )
    assert f"fetched from {hub.url} into the HF cache ({config})" in text
    assert ("GET", f"/{CLONE}/resolve/main/config.json") in hub.requests
    code, bundled = _fits(BUNDLED, capsys)
    assert code == 0 and len(_answers(text)) == 2
    assert _answers(text) == _answers(bundled)


def test_a_cached_config_is_used_without_the_network(hub_env, monkeypatch, capsys):
    write_snapshot(hub_env, CLONE, bundled_as_published(BUNDLED), ref=False)  # a snapshot, no refs/main
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, text = _fits(CLONE, capsys)
    assert code == 0, text
    assert "read from its config.json in the HF cache (" in text
    assert _answers(text) == _answers(_fits(BUNDLED, capsys)[1])


def test_the_fit_map_of_a_fetched_config_is_the_bundled_ones(hub_env, monkeypatch, capsys):
    argv = ["fitmap", "--card", "16gb", "--k", "4,8", "--b", "2", "--no-plot"]
    with FakeHub({CLONE: bundled_as_published(BUNDLED)}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        code, text = run_cli([*argv, "--model", CLONE, "--model", BUNDLED], capsys)
    assert code == 0, text
    rows = {}
    names = {CLONE.split("/")[1]: CLONE, BUNDLED.split("/")[1]: BUNDLED}  # the table drops the organisations
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if cells[0] in names:
            rows.setdefault(names[cells[0]], []).append(cells[1:])
    assert len(rows[CLONE]) == 2 and rows[CLONE] == rows[BUNDLED]


def test_predict_of_a_fetched_config_is_the_bundled_ones(hub_env, monkeypatch, capsys):
    sweep = str(Path(__file__).parents[2] / "sweeps" / "cpu-smoke.yaml")
    sets = ["--set", "grid.num_generations=[8]", "--set", "max_completion_length=1024", "--card", "16gb"]

    def figures(model: str) -> list[list[str]]:
        code, text = run_cli(["predict", sweep, *sets, "--set", f"model={model}"], capsys)
        assert code == 0, text
        return [[c.strip() for c in line.split("│")[1:]] for line in text.splitlines() if "-k8-b1-" in line]

    with FakeHub({CLONE: bundled_as_published(BUNDLED)}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        fetched = figures(CLONE)
    assert len(fetched) == 6 and fetched == figures(BUNDLED)


def test_an_unreachable_hub_is_refused_with_what_was_tried_and_the_command_that_fetches_it(
    hub_env, monkeypatch, capsys
):
    endpoint = closed_port_url()
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    code, text = _fits("acme/Unreachable-7B", capsys)
    assert code == 2 and "Traceback" not in text
    assert "fits: 1 error(s), nothing answered:" in text
    assert f"its config.json is not in the HF cache ({hub_env})" in text
    assert f"fetching {endpoint}/acme/Unreachable-7B/resolve/main/config.json failed (" in text
    assert (
        "fetch it once where the hub is reachable with `hf download acme/Unreachable-7B config.json`" in text
    )


def test_a_gated_model_says_the_token_it_needs(hub_env, monkeypatch, capsys):
    with FakeHub({}, gated={"acme/Gated-8B"}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        code, text = run_cli(["fitmap", "--card", "16gb", "--model", "acme/Gated-8B", "--no-plot"], capsys)
    assert code == 2
    assert (
        f"'acme/Gated-8B' is gated on {hub.url}: its config.json needs the token of an account that " in text
    )
    assert "then set HF_TOKEN (or `hf auth login`)" in text


def test_a_model_the_hub_does_not_have_is_named_so(hub_env, monkeypatch, capsys):
    with FakeHub({}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        code, text = _fits("acme/NoSuchModel", capsys)
    assert code == 2 and f"'acme/NoSuchModel': no such model on {hub.url}" in text


@pytest.mark.parametrize("as_folder", [False, True])
def test_a_path_to_a_config_json_or_its_folder_is_the_model(tmp_path, capsys, as_folder):
    config = tmp_path / "my-qwen" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps(bundled_as_published(BUNDLED)))
    model = str(config.parent if as_folder else config)
    code, text = _fits(model, capsys)
    assert code == 0, text
    assert f"{model}: architecture (qwen2, 36 layers x 2048 hidden) read from {config}" in text
    assert _answers(text) == _answers(_fits(BUNDLED, capsys)[1])


def test_a_path_that_is_not_there_is_refused_without_the_list_of_models(tmp_path, capsys):
    code, text = _fits(str(tmp_path / "nowhere" / "config.json"), capsys)
    assert code == 2
    assert "no such file or folder; give the path of a config.json, a folder holding one" in text
    assert "random:Qwen/Qwen3-8B" not in text


def test_a_twin_is_chosen_by_architecture_and_size_not_by_name():
    twin, why = nearest_twin(MATH_7B, "Qwen/Qwen2.5-Math-7B", bundled_models())
    assert twin == "Qwen/Qwen2.5-7B-Instruct"  # the Qwen2.5 of its size, not a DeepSeek distill of it
    assert why == (
        "random:Qwen/Qwen2.5-7B-Instruct is Qwen/Qwen2.5-Math-7B's nearest bundled twin: the same "
        "architecture (qwen2), 7.6B parameters, 28 layers x 3584 hidden against its 7.6B parameters, 28 "
        "layers x 3584 hidden"
    )
    llama = {**bundled_as_published("meta-llama/Llama-3.2-3B-Instruct"), "num_hidden_layers": 8}
    assert nearest_twin(llama, "acme/Llama-1.2B", bundled_models())[0] == "meta-llama/Llama-3.2-1B-Instruct"


def test_an_architecture_with_no_bundled_model_gets_the_nearest_in_size_and_says_so():
    config = {**MATH_7B, "model_type": "olmo2"}
    twin, why = nearest_twin(config, "acme/Olmo-7B", bundled_models())
    assert bundled_models()[twin] and "no bundled model is a olmo2, so the nearest in size of any" in why


def test_random_weights_of_a_cached_model_point_at_its_twin(hub_env, monkeypatch):
    write_snapshot(hub_env, "Qwen/Qwen2.5-Math-7B", MATH_7B)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (problem,) = model_problems("random:Qwen/Qwen2.5-Math-7B")
    assert problem.startswith(
        "model: 'random:Qwen/Qwen2.5-Math-7B' has no bundled config for random weights; "
    )
    assert "the same architecture (qwen2)" in problem
    assert problem.endswith(
        ": --set model=random:Qwen/Qwen2.5-7B-Instruct; or use the hub id Qwen/Qwen2.5-Math-7B itself for real weights"
    )


def test_rlsweep_models_shows_a_cached_models_size_and_its_twin(hub_env, monkeypatch, capsys):
    write_snapshot(hub_env, "Qwen/Qwen2.5-Math-7B", MATH_7B)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, text = run_cli(["models", "Qwen/Qwen2.5-Math-7B"], capsys)
    assert code == 0, text
    (row,) = [line for line in text.splitlines() if line.startswith("│ Qwen/Qwen2.5-Math-7B")]
    assert [c.strip() for c in row.split("│")[2:5]] == ["7.62", "152064", "28"]
    flat = text.replace("\n", " ")
    assert (
        "Qwen/Qwen2.5-Math-7B: not bundled; architecture read from its config.json in the HF cache (" in flat
    )
    assert "random:Qwen/Qwen2.5-7B-Instruct is Qwen/Qwen2.5-Math-7B's nearest bundled twin" in flat


def test_an_architecture_the_memory_model_does_not_describe_is_refused_with_a_stand_in(tmp_path, capsys):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**MATH_7B, "model_type": "olmo2"}))
    code, text = _fits(str(config), capsys)
    assert code == 2
    assert "model_type 'olmo2' is not an architecture the memory model describes" in text
    assert "a stand-in that is described: --model " in text and "no bundled model is a olmo2" in text


def test_a_fresh_rlsweep_process_reads_the_hub_from_its_environment(tmp_path, capsys):
    """As a shell runs it: huggingface_hub imported with HF_HOME and HF_ENDPOINT already set."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_OFFLINE"))
    }
    with FakeHub({CLONE: bundled_as_published(BUNDLED)}) as hub:
        env |= {"HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": hub.url}
        run = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "fits", "--model", CLONE, *FITS],
            capture_output=True, text=True, cwd=root, env=env, timeout=120,
        )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"fetched from {hub.url} into the HF cache ({tmp_path / 'hf' / 'hub'}" in run.stdout
    assert _answers(run.stdout) == _answers(_fits(BUNDLED, capsys)[1])


def test_rlsweep_models_of_a_config_transformers_cannot_build_says_why_without_a_traceback(tmp_path, capsys):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**MATH_7B, "model_type": "no-such-type"}))
    code, text = run_cli(["models", str(config)], capsys)
    assert code == 2 and "Traceback" not in text
    assert f"{config}: transformers builds no model from its config.json: " in text
    assert "no bundled model is a no-such-type, so the nearest in size of any" in text
