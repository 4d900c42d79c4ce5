"""A model's facts (trainers/_facts.py): the bundled models' shipped with the code are what counting them
on the meta device gives now, a config they were not counted from is counted and kept, and `rlsweep models`
answers from them without importing torch or transformers."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.model_facts import counted
from trainers import _facts, _facts_shipped, models
from trainers.models import SMOLLM2, bundled_models, facts_config, model_facts

ROOT = Path(__file__).resolve().parents[2]
REGENERATE = "write them again with `python tools/model_facts.py` and check the diff"


def test_the_shipped_facts_are_what_counting_every_bundled_model_on_meta_gives_with_this_transformers():
    assert _facts.transformers_version() == _facts_shipped.TRANSFORMERS, REGENERATE
    assert _facts_shipped.RULE == _facts.RULE_VERSION, REGENERATE
    names = [*bundled_models(), SMOLLM2]
    assert sorted(_facts_shipped.FACTS) == sorted(names), REGENERATE
    assert _facts.shipped_text(counted()) == _facts.SHIPPED.read_text(), REGENERATE


def test_a_bundled_model_is_answered_from_the_shipped_facts_without_counting(monkeypatch, tmp_path):
    monkeypatch.setenv("RLSWEEP_CACHE", str(tmp_path))
    monkeypatch.setattr(models, "count_facts", lambda hub_id: pytest.fail(f"{hub_id} counted again"))
    facts = model_facts("Qwen/Qwen3-4B")
    digest, *figures = _facts_shipped.FACTS["Qwen/Qwen3-4B"]  # counted on meta: the test above
    assert digest == _facts.digest(facts_config("Qwen/Qwen3-4B"))
    assert [facts.parameters, facts.vocab, facts.layers, facts.kv_heads, facts.quantizable] == figures
    assert not (tmp_path / "facts").exists()  # nothing counted, nothing kept


def test_a_config_the_facts_were_not_counted_from_is_counted_once_then_read_from_the_cache(
    monkeypatch, tmp_path
):
    monkeypatch.setenv("RLSWEEP_CACHE", str(tmp_path))
    config = dict(facts_config("Qwen/Qwen3-0.6B")) | {"num_hidden_layers": 2}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert _facts.shipped(str(path), config) is None  # not bundled: nothing shipped
    counts = []
    real = models.count_facts
    monkeypatch.setattr(models, "count_facts", lambda hub_id: counts.append(hub_id) or real(hub_id))
    first = model_facts(str(path))
    assert counts == [str(path)] and first.layers == 2
    assert first.parameters < _facts_shipped.FACTS["Qwen/Qwen3-0.6B"][1]
    again = model_facts(str(path))
    assert counts == [str(path)] and again == first  # read back from <cache>/facts, not counted again
    assert len(list((tmp_path / "facts").glob("*.json"))) == 1
    # the same config edited: another digest, counted again
    path.write_text(json.dumps(config | {"num_hidden_layers": 3}))
    assert model_facts(str(path)).layers == 3 and len(counts) == 2


def test_a_shipped_entry_whose_config_changed_is_not_read(monkeypatch):
    config = dict(facts_config("Qwen/Qwen3-4B"))
    assert _facts.shipped("Qwen/Qwen3-4B", config) is not None
    assert _facts.shipped("Qwen/Qwen3-4B", config | {"vocab_size": 1000}) is None
    monkeypatch.setattr(_facts_shipped, "TRANSFORMERS", "0.0.1")  # counted by another transformers
    assert _facts.shipped("Qwen/Qwen3-4B", config) is None


def test_rlsweep_models_lists_every_bundled_model_without_importing_torch_or_transformers(tmp_path):
    code = (
        "import sys; from orchestrator.cli import main; code = main(['models']); "
        "print('torch' in sys.modules, 'transformers' in sys.modules, file=sys.stderr); sys.exit(code)"
    )
    env = {**os.environ, "RLSWEEP_CACHE": str(tmp_path), "HOME": str(tmp_path), "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr.split()[-2:] == ["False", "False"], done.stderr
    assert f"{len(bundled_models())} bundled model(s)" in done.stdout
    assert all(hub_id in done.stdout for hub_id in bundled_models())
