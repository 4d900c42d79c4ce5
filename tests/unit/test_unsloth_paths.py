"""Unsloth's path per family (trainers/stacks/_unsloth_paths.py) checked against the installed unsloth's own
source, read as text (importing it patches transformers and TRL process-wide): a release that sends a
bundled family down another path, or changes what a path does, fails here."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
from pathlib import Path

import pytest

from trainers.models import CONFIG_DIR, TINY_CONFIG
from trainers.stacks._unsloth_paths import (
    COMPILED_LORA,
    FUSED,
    GENERIC_PATCH,
    PATHS,
    TRANSFORMERS,
    UNSLOTH,
    path_for,
)

pytestmark = pytest.mark.skipif(importlib.util.find_spec("unsloth") is None, reason="unsloth not installed")


def _source(relative: str) -> str:
    root = Path(importlib.util.find_spec("unsloth").origin).parent
    return (root / relative).read_text()


def _function(source: str, name: str) -> str:
    """The text of `def name` (a method or a function) up to the next definition at its indentation."""
    match = re.search(rf"^(\s*)def {name}\(", source, re.M)
    assert match, f"unsloth no longer defines {name}"
    indent = match.group(1)
    end = re.compile(rf"^{indent}(?:def |class |@)", re.M).search(source, match.end())
    return source[match.start() : end.start() if end else len(source)]


def _bundled_model_types() -> set[str]:
    types = {json.loads(path.read_text())["model_type"] for path in CONFIG_DIR.glob("*.json")}
    return types | {TINY_CONFIG["model_type"], "llama"}  # smollm2 is a llama


def _dispatch() -> dict[str, str]:
    """model_type -> the class FastLanguageModel.from_pretrained dispatches it to (loader.py)."""
    loader = _source("models/loader.py")
    start = loader.index("class FastLanguageModel")
    body = _function(loader[start:], "from_pretrained")
    found = {}
    for match in re.finditer(r'if model_type == "(\w+)"\s*:(.*?)(?=\n\s*(?:elif|else)\b)', body, re.S):
        chosen = re.search(r"dispatch_model = (\w+)", match.group(2))
        if chosen:
            found[match.group(1)] = chosen.group(1)
    return found


def test_every_bundled_family_has_a_path():
    missing = _bundled_model_types() - set(PATHS)
    assert not missing, f"model types rlsweep bundles with no Unsloth path recorded: {sorted(missing)}"


def test_each_family_goes_to_the_model_file_unsloths_loader_dispatches_it_to():
    dispatch = _dispatch()
    assert {"llama", "qwen2"} <= set(dispatch), f"the loader's dispatch was not found as read: {dispatch}"
    for model_type in _bundled_model_types():
        path = PATHS[model_type]
        if model_type in dispatch:
            assert path.fast and path.patch.endswith(dispatch[model_type]), (model_type, dispatch[model_type])
            module = path.patch.split()[0].removeprefix("unsloth/")
            assert f"class {dispatch[model_type]}" in _source(module), (model_type, module)
        else:
            assert path.patch == GENERIC_PATCH, f"{model_type}: Unsloth's loader sends it to FastModel"
    assert "FastModel.from_pretrained" in _function(
        _source("models/loader.py")[_source("models/loader.py").index("class FastLanguageModel") :],
        "from_pretrained",
    )


def test_a_fast_familys_model_file_decodes_through_unsloths_fast_inference_and_the_generic_path_through_generate():
    for model_type in _bundled_model_types():
        path = PATHS[model_type]
        if path.fast:
            assert path.decoding == UNSLOTH
            source = _source(path.patch.split()[0].removeprefix("unsloth/"))
            pre_patch = _function(source, "pre_patch")
            assert re.search(r"ForCausalLM\.forward = \w+", pre_patch), model_type
            assert "fast_forward_inference" in source, f"{model_type}: no fast decoding in its model file"
        else:
            assert path.decoding == TRANSFORMERS
    generate = _function(_source("models/vision.py"), "unsloth_base_fast_generate")
    assert 'cache_implementation = "static"' in generate and "_old_generate" in generate
    buffers = _function(_source("models/_decode_graphs.py"), "alloc_decode_buffers")
    assert "increment + seq_len + 1" in buffers, (
        "the eager decode buffer is no longer increment + seq_len + 1"
    )
    assert re.search(r"KV_CACHE_INCREMENT = 512\b", _source("models/llama.py"))


def test_the_families_decoded_as_cuda_graphs_are_unsloths_own_list():
    source = _source("models/_decode_graphs.py")
    listed = re.search(r"^_SUPPORTED_MODEL_TYPES = (\{.*?\})", source, re.M)
    assert listed, "_decode_graphs no longer names the graphed model types"
    graphed = ast.literal_eval(listed.group(1))
    bundled = _bundled_model_types()
    assert {t for t in bundled if PATHS[t].decode_graphs} == graphed & bundled


def test_unsloths_fused_lora_kernels_run_on_the_fast_families_alone():
    patch_peft = _function(_source("models/llama.py"), "patch_peft_model")
    fused = set(
        re.findall(r'model_type == "(\w+)":\s*\n\s*apply_lora_mlp = apply_lora_mlp_swiglu', patch_peft)
    )
    for model_type in _bundled_model_types():
        path = PATHS[model_type]
        assert (path.lora == FUSED) == (path.fast and model_type in fused), model_type
        assert (path.lora == COMPILED_LORA) == (not path.fast), model_type
    assert "apply_lora_mlp" not in _source("models/vision.py"), "FastBaseModel now fuses its LoRA MLP"


def test_fastmodels_lora_forward_casts_the_adapters_to_the_base_outputs_dtype_not_the_input_to_theirs():
    compiler = (Path(importlib.util.find_spec("unsloth_zoo").origin).parent / "compiler.py").read_text()
    forward = compiler[compiler.index('COMPILED_LORA_FORWARD = """') :]
    forward = forward[: forward.index('"""', len('COMPILED_LORA_FORWARD = """'))]
    assert "target_dtype = result.dtype" in forward
    assert "dropout(x).to(target_dtype) @ lora_A.weight.to(target_dtype).t()" in forward


def test_blocks_compile_per_layer_on_both_paths_the_fast_one_from_torch_2_11():
    assert re.search(r'TRACE_LORA_FUNCTIONS = Version\(torch.__version__\) >= Version\("2.11.0"\)',
                     _source("kernels/fast_lora.py"))  # fmt: skip
    assert "TRACE_LORA_FUNCTIONS" in _function(_source("models/llama.py"), "_legacy_block_compile")
    assert "patch_block_compile(model)" in _source("models/vision.py")
    assert 'Version("2.7")' in _function(_source("models/_block_compile.py"), "_torch_supported")
    for path in PATHS.values():
        assert ("2.11" in path.blocks) == path.fast


def test_the_loss_packs_sequences_unless_one_passes_the_sliding_window():
    source = _source("models/rl_replacements.py")
    assert "UNSLOTH_GRPO_SEQ_PACKING" in source
    assert re.search(r"_pk_sw_ok = not \(isinstance\(_pk_sw, int\) and _pk_sw > 0 and _pk_maxseg > _pk_sw\)",
                     source)  # fmt: skip
    assert all("sliding window" in path.loss for path in PATHS.values())


def test_a_model_type_rlsweep_does_not_bundle_takes_fastmodels_path():
    assert path_for("olmo2").patch == GENERIC_PATCH and path_for("olmo2").decoding == TRANSFORMERS
