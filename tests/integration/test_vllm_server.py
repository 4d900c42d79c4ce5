"""Server mode's vLLM server, `trl vllm-serve`, started by the supervisor's code on loopback, generating,
sampled and stopped by its PID (vLLM's CPU build; training against it needs NCCL, so a GPU)."""

import psutil
import pytest

from orchestrator.running.child_env import child_env
from orchestrator.running.process_group import kill_group
from orchestrator.running.supervisor import run_trial
from orchestrator.running.telemetry import MemorySampler
from orchestrator.running.vllm_server import HOST, split_gpus, vllm_server
from tests.helpers.trainer_child import ROOT, needs_vllm
from trainers.distributed import die_with_parent
from trainers.models import resolve_model
from trainers.trial import TrialSpec

pytestmark = [pytest.mark.slow, needs_vllm]


@pytest.mark.heavy
def test_the_supervisor_starts_trl_vllm_serve_on_loopback_generates_samples_it_and_stops_it_by_pid(tmp_path):
    from trl.generation.vllm_client import VLLMClient

    spec = TrialSpec(
        generation="vllm", vllm_mode="server", memory_budget_gib=2.0, vllm_gpu_memory_utilization=0.5,
        max_prompt_length=64, max_completion_length=8, num_threads=1,
    )  # fmt: skip
    model = resolve_model("tiny", str(ROOT / ".cache"))
    seen_rss: list[float] = []
    launch = {
        "env": child_env(None, 1),
        "stop": kill_group,
        "preexec_fn": die_with_parent,
    }  # the supervisor's
    with vllm_server(
        spec,
        model,
        tmp_path / "vllm-server.log",
        sampler_factory=lambda pid: MemorySampler(pid, hz=5),
        **launch,
    ) as server:
        group = [psutil.Process(server.pid), *psutil.Process(server.pid).children(recursive=True)]
        client = VLLMClient(base_url=server.base_url, connection_timeout=10)
        out = client.generate(prompts=[[1, 2, 3]], n=2, max_tokens=8, generation_kwargs={"min_tokens": 8})
        # as the sampler counts a process tree: the leader's RSS, each child's unique set (no shared page twice)
        seen_rss.append(
            (group[0].memory_info().rss + sum(p.memory_full_info().uss for p in group[1:])) / 1024**3
        )
        pid = server.pid
        assert server.base_url.startswith(f"http://{HOST}:")
        assert (tmp_path / "vllm-server.pid").read_text() == str(pid)
    # two completions of exactly 8 tokens: min_tokens reached the server's sampling parameters
    assert [len(ids) for ids in out["completion_ids"]] == [8, 8]
    # stopped, its engine processes with it
    _, alive = psutil.wait_procs(group, timeout=10)
    assert alive == [] and group[0].pid == pid
    # the sampled peak covers the server and its engine process as read here while it generated
    assert server.peak["rss_peak_gib"] >= seen_rss[0] * 0.95


def test_server_mode_trains_on_all_gpus_but_the_last_which_serves():
    assert split_gpus("0,1,2,3") == ("0,1,2", "3")
    with pytest.raises(
        ValueError, match=r"vllm_mode: server needs at least 2 GPUs .* the trial holds 1 \('0'\)"
    ):
        split_gpus("0")


@pytest.mark.heavy
def test_a_server_mode_trial_on_a_cpu_fails_at_the_weight_sync_with_the_server_peak_kept_and_the_server_stopped(
    tmp_path,
):
    spec = TrialSpec(
        model="tiny", generation="vllm", vllm_mode="server", quantization="none", memory_budget_gib=2.0,
        num_generations=2, batch_size=2, max_completion_length=8, max_steps=1, num_threads=1,
        model_cache_dir=str(ROOT / ".cache"),
    )  # fmt: skip
    result = run_trial(spec, trial_dir=tmp_path)
    pid = int((tmp_path / "vllm-server.pid").read_text())
    # TRL syncs weights to a server only over NCCL: on a CPU the trainer fails there, saying so
    assert result.status == "failed"
    assert "Weight synchronization runs on vLLM's NCCL weight-transfer engine, which needs a CUDA device" in (
        result.status_detail
    )
    assert spec.vllm_server_port is not None
    # the server was up (its sampled peak is the trial's) and is stopped whatever the trainer did
    assert result.peak["vllm_server_peak_gib"] > 0.5  # vLLM's engine alone holds more than torch's import
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
