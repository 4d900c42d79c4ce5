"""What `run` would die or hang on is refused by `validate` (and by `run` before it writes anything):
grids past max_trials, alias bombs, huge or non-UTF-8 files, NaN/infinity, integers no trial holds,
resources this machine lacks, and output dirs that must not take a sweep."""

import math
import os
import time
from pathlib import Path

import pytest
import yaml

from orchestrator.cli import main
from orchestrator.spec import plan as plan_module
from orchestrator.spec.load import MAX_FILE_BYTES, MAX_NODES, apply_overrides, load_sweep, parse_sweep
from orchestrator.spec.plan import plan, resource_problems
from orchestrator.spec.sweep import INT_MAX, Resources, SweepError
from orchestrator.words.storage import output_dir_problems, output_location

SMOKE = str(Path(__file__).parents[2] / "sweeps" / "cpu-smoke.yaml")


def errors_of(raw: dict) -> str:
    with pytest.raises(SweepError) as info:
        parse_sweep(raw)
    return "\n".join(info.value.errors)


def load_errors(path: Path) -> str:
    with pytest.raises(SweepError) as info:
        load_sweep(path)
    return "\n".join(info.value.errors)


# ------------------------------------------------------------------------------------------------
# Grid size
# ------------------------------------------------------------------------------------------------
def test_a_million_trial_grid_is_refused_from_its_axes_without_expanding_it():
    axes = {"seed": list(range(100)), "lora_r": list(range(1, 101)), "num_generations": list(range(2, 102))}
    started = time.monotonic()
    text = errors_of({"name": "big", "grid": axes})
    assert time.monotonic() - started < 5, "the size comes from the list lengths, not an expansion"
    size = math.prod(len(v) for v in axes.values())
    assert f"= {size:,} trials, over max_trials 10,000" in text
    assert f"set max_trials: {size}" in text


def test_max_trials_raises_the_limit_and_the_limit_itself_is_allowed():
    grid = {"seed": list(range(100)), "lora_r": list(range(1, 101))}
    assert "over max_trials 5,000" in errors_of({"name": "g", "grid": grid, "max_trials": 5000})
    assert parse_sweep({"name": "g", "grid": grid}).max_trials == 10_000  # 100 x 100 = the default limit
    raised = parse_sweep({"name": "g", "grid": {**grid, "beta": [0.0, 0.1]}, "max_trials": 20_000})
    assert raised.max_trials == 20_000 and math.prod(len(v) for v in raised.grid.values()) == 100 * 100 * 2


# ------------------------------------------------------------------------------------------------
# The file itself
# ------------------------------------------------------------------------------------------------
def billion_laughs(levels: int) -> str:
    lines = ["name: bomb", 'l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]")
    return "\n".join(lines) + "\n"


def test_a_billion_laughs_file_is_refused_before_it_expands(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(billion_laughs(9))
    started = time.monotonic()
    text = load_errors(path)
    assert time.monotonic() - started < 5
    lists = [1 + 9]  # l0: the list and its nine strings
    for _ in range(8):
        lists.append(1 + 9 * lists[-1])  # each level: a list of nine copies of the one before
    expanded = 1 + 2 + sum(1 + n for n in lists)  # the mapping, name: bomb, each key and its list
    assert f"expand this YAML to {expanded:,} values, over the limit of {MAX_NODES:,}" in text


def test_aliases_that_stay_small_are_fine(tmp_path):
    path = tmp_path / "anchors.yaml"
    path.write_text("name: a\ntask_args: &args {num_samples: 64}\ntask_settings: {arithmetic: *args}\n")
    assert load_sweep(path).task_settings == {"arithmetic": {"num_samples": 64}}


def test_a_recursive_alias_is_refused(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text("name: r\ntask_args: &x {inner: *x}\n")
    assert "recursive alias" in load_errors(path)


def test_a_file_over_the_size_limit_is_refused_unparsed(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_text("name: h\n# " + "x" * MAX_FILE_BYTES + "\n")
    size = len("name: h\n# ") + MAX_FILE_BYTES + 1
    assert f"{size:,} bytes, over the 1 MiB limit for a sweep file" in load_errors(path)


def test_binary_and_non_utf8_files_get_a_message(tmp_path):
    latin = tmp_path / "latin1.yaml"
    latin.write_bytes("name: caf\xe9\n".encode("latin-1"))
    assert "not UTF-8 text (byte 0xe9 at offset 9)" in load_errors(latin)
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(bytes(range(256)))
    assert "not UTF-8 text (byte 0x80 at offset 128)" in load_errors(binary)
    nul = tmp_path / "nul.yaml"
    nul.write_bytes(b"name: x\x00\n")
    assert "not valid YAML" in load_errors(nul)
    assert "not a regular file" in load_errors(tmp_path)


def test_bad_yaml_in_set_names_the_override():
    with pytest.raises(SweepError, match=r"--set fixed.seed: not valid YAML"):
        apply_overrides({"name": "x"}, ["fixed.seed=[1"])


def test_a_key_that_is_not_text_is_an_error_not_a_crash():
    assert "grid.1: unknown setting" in errors_of({"name": "x", "grid": {1: [2]}})


# ------------------------------------------------------------------------------------------------
# Numbers
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"grid": {"learning_rate": [1e-4, float("nan")]}}, "grid.learning_rate[1]: must be a finite number"),
        ({"fixed": {"temperature": float("inf")}}, "fixed.temperature: must be a finite number, got inf"),
        ({"fixed": {"beta": float("-inf")}}, "fixed.beta: must be a finite number, got -inf"),
        ({"memory": {"budget_gib": float("inf")}}, "memory.budget_gib: input should be a finite number"),
        ({"memory": {"margin_gib": float("nan")}}, "memory.margin_gib: input should be a finite number"),
        (
            {"resources": {"gpus_per_trial": float("inf")}},
            "resources.gpus_per_trial: input should be a finite",
        ),
        ({"timeout_s": float("nan")}, "timeout_s: input should be a finite number"),
        (
            {"grid": {"num_generations": [2, 10**29]}},
            f"grid.num_generations[1]: {10**29} is past {INT_MAX:,}",
        ),
        ({"fixed": {"max_steps": 2**63}}, f"fixed.max_steps: {2**63} is past {INT_MAX:,}"),
        ({"fixed": {"seed": 2**32}}, f"fixed.seed: {2**32} is past {2**32 - 1:,}"),
        (
            {"fixed": {"learning_rate": 10**400}},
            "fixed.learning_rate: 1000",
        ),  # a float knob, no OverflowError
        (
            {"oom": {"probe_steps": 10**29}},
            "oom.probe_steps: input should be less than or equal to 2147483647",
        ),
        ({"resources": {"cpus_per_trial": 2**40}}, "resources.cpus_per_trial: input should be less than"),
    ],
)
def test_nan_infinity_and_oversized_integers_are_refused(raw, expected):
    assert expected in errors_of({"name": "n", **raw})


def test_yaml_nan_and_inf_spellings_are_refused(tmp_path):
    path = tmp_path / "nan.yaml"
    path.write_text("name: n\nfixed: {learning_rate: .nan}\ngrid: {temperature: [1.0, .inf]}\n")
    text = load_errors(path)
    assert "fixed.learning_rate: must be a finite number, got nan" in text
    assert "grid.temperature[1]: must be a finite number, got inf" in text


def test_the_largest_allowed_integers_pass():
    sweep = parse_sweep({"name": "ok", "fixed": {"seed": 2**32 - 1, "max_steps": INT_MAX}})
    assert sweep.fixed == {"seed": 4_294_967_295, "max_steps": 2_147_483_647}


# ------------------------------------------------------------------------------------------------
# Resources
# ------------------------------------------------------------------------------------------------
def test_cpus_beyond_the_machine_are_refused_with_the_numbers():
    (problem,) = resource_problems(Resources(cpus_per_trial=64), cpus=2, gpus=0)
    assert problem.startswith("resources.cpus_per_trial: 64, but this machine has 2 CPU(s)")
    assert problem.endswith("set resources.cpus_per_trial to at most 2")
    assert resource_problems(Resources(cpus_per_trial=2), cpus=2, gpus=0) == []


def test_gpus_beyond_the_machine_are_refused_and_ignored_without_gpus():
    (problem,) = resource_problems(Resources(gpus_per_trial=2), cpus=8, gpus=1)
    assert "resources.gpus_per_trial: 2, but this machine has 1 GPU(s)" in problem
    assert resource_problems(Resources(gpus_per_trial=0.5), cpus=8, gpus=1) == []
    assert resource_problems(Resources(gpus_per_trial=4), cpus=8, gpus=0) == [], "no GPU: the knob is ignored"


def test_plan_checks_resources_for_a_local_run_only(monkeypatch):
    monkeypatch.setattr(plan_module, "local_cpus", lambda: 2)
    monkeypatch.setattr(plan_module, "local_gpus", lambda: 0)
    sweep = parse_sweep({"name": "r", "resources": {"cpus_per_trial": 64}, "fixed": {"model": "tiny"}})
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert any(p.startswith("resources.cpus_per_trial: 64") for p in plan(sweep).problems)
    monkeypatch.setenv("RAY_ADDRESS", "http://head:8265")
    assert plan(sweep).problems == [], "a cluster's resources are not this machine's"


def test_local_gpus_follow_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,2")
    assert plan_module.local_gpus() == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert plan_module.local_gpus() == 0


# ------------------------------------------------------------------------------------------------
# Output dirs
# ------------------------------------------------------------------------------------------------
def dir_problems(text: str) -> str:
    return "\n".join(output_dir_problems(text, output_location(text)))


@pytest.mark.parametrize("system", ["/", "/etc", "/usr", "/bin", "/boot", "/dev", "/proc", "/sys", "/var"])
def test_system_folders_are_refused(system):
    assert f"'{system}' is a system folder" in dir_problems(system)


def test_the_home_folder_and_system_trees_are_refused():
    assert "is your home folder" in dir_problems("~")
    assert "inside the system folder /etc" in dir_problems("/etc/rlsweep")
    assert "inside the system folder /proc" in dir_problems("/proc/self/out")


def test_a_file_or_a_path_under_a_file_is_refused(tmp_path):
    file = tmp_path / "f"
    file.write_text("x")
    assert f"{file} is a file" in dir_problems(str(file))
    assert f"{file}/a/b is under {file}, which is a file" in dir_problems(str(file / "a" / "b"))


def test_a_read_only_folder_is_refused(tmp_path, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == locked else real_access(p, mode))
    assert f"{locked} is read-only for this user" in dir_problems(str(locked))
    assert f"cannot be made: {locked} is read-only" in dir_problems(str(locked / "new"))


@pytest.mark.parametrize("name", ["a b", "it's", 'say"hi"', "tab\there"])
def test_paths_with_spaces_or_quotes_are_refused(tmp_path, name):
    assert "holds a space, quote, backslash or control character" in dir_problems(str(tmp_path / name))


def test_fresh_and_existing_folders_pass(tmp_path):
    assert dir_problems(str(tmp_path / "new" / "dir")) == ""
    assert dir_problems(str(tmp_path)) == ""


def test_validate_checks_the_output_dir_run_would_use(tmp_path, capsys):
    file = tmp_path / "f"
    file.write_text("x")
    assert main(["validate", SMOKE, "--output-dir", str(file / "out")]) == 2
    assert f"--output-dir: {file}/out is under {file}, which is a file" in capsys.readouterr().err
    assert main(["validate", SMOKE, "--output-dir", str(tmp_path / "ok")]) == 0
    assert f"-> {tmp_path / 'ok'}" in capsys.readouterr().out
    assert not (tmp_path / "ok").exists(), "validate writes nothing"
    sweep = tmp_path / "s.yaml"
    sweep.write_text(yaml.safe_dump({"name": "s", "output_dir": "/"}))
    assert main(["validate", str(sweep)]) == 2
    assert "output_dir: '/' is a system folder" in capsys.readouterr().err


def test_run_refuses_a_bad_output_dir_before_writing_anything(tmp_path, capsys, monkeypatch):
    import orchestrator.running.driver

    def past_the_check(sweep):  # were the check missed, stop here rather than run a sweep into /
        raise AssertionError("run got past the output dir check")

    monkeypatch.setattr(orchestrator.running.driver, "make_plan", past_the_check)
    before = sorted(os.listdir("/"))
    assert main(["run", SMOKE, "--output-dir", "/"]) == 2
    assert "--output-dir: '/' is a system folder" in capsys.readouterr().err
    assert sorted(os.listdir("/")) == before
    quoted = tmp_path / "it's"
    assert main(["run", SMOKE, "--output-dir", str(quoted)]) == 2
    assert not quoted.exists()


def test_yaml_nested_past_the_parser_is_refused(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("name: d\ntask_args: " + "[" * 5000 + "]" * 5000 + "\n")
    assert "YAML nested too deeply" in load_errors(path)
