"""Real Ray Tune sweeps of real `tiny` trainer children, with real MLflow (sqlite) and Parquet."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pandas as pd
import polars as pl
import psutil
import pyarrow.parquet as pq
import pytest
from mlflow.tracking import MlflowClient

from orchestrator.cli import main
from orchestrator.judging.pruning import RUN
from orchestrator.running._tune import FINAL, RecorderCallback, payload_row
from orchestrator.running.driver import run_sweep
from orchestrator.spec.load import load_sweep
from tests.helpers.html_outline import outline
from tests.helpers.html_outline import table_after as html_table_after
from tests.helpers.images import assert_varied_png
from tests.helpers.markdown import table_after as md_table_after
from tests.helpers.processes import descendants, kill_trees, private_ray_dirs
from tests.helpers.sweeps import tiny_sweep

pytestmark = pytest.mark.slow


def trial_runs(uri: str, experiment: str):
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get("rlsweep.role") == "sweep"]
    children = [r for r in runs if "rlsweep.trial_key" in r.data.tags]
    return client, parents, children


def test_a_trial_actor_and_its_trainer_child_run_at_the_drivers_priority_not_rays_nice_15(ray_fake_gpus):
    import ray

    @ray.remote(num_cpus=1, num_gpus=1)
    def niceness() -> tuple[int, int]:
        child = subprocess.run([sys.executable, "-c", "import os; print(os.nice(0))"], capture_output=True)
        return os.nice(0), int(child.stdout)

    assert ray.get(niceness.remote(), timeout=120) == (os.nice(0), os.nice(0))


def test_fake_gpu_sweep_runs_two_at_once_and_sinks_agree(ray_fake_gpus, tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    # trial_key -> (pid of the Ray worker that ran it: Tune puts it on every result, pid of its trainer)
    processes = {}
    forward = RecorderCallback.on_trial_result

    def note_worker(self, iteration, trials, trial, result, **info):
        if result.get("kind") == FINAL:
            processes[trial.config["trial_key"]] = (result["pid"], payload_row(result)["pid"])
        return forward(self, iteration, trials, trial, result, **info)

    monkeypatch.setattr(RecorderCallback, "on_trial_result", note_worker)
    # max_prompt_length 16 is shorter than the task's prompts (33 tokens with tiny's tokenizer): only the
    # trainer finds out, at run time.
    path = tiny_sweep(
        tmp_path / "s.yaml",
        "fakegpu",
        {"mode": ["grpo", "gspo"], "max_prompt_length": [96, 16]},
        tracking={"mlflow_uri": uri},
    )
    outcome = run_sweep(load_sweep(path), output_dir=tmp_path / "out")
    trials = pq.read_table(outcome.output_dir / "trials.parquet").to_pandas()
    assert sorted(trials.status) == ["completed", "completed", "failed", "failed"]
    failed = trials[trials.status == "failed"]
    # The longest prompt, measured here with tiny's own tokenizer, independently of the trainer.
    from tasks import load_task
    from trainers.models import TINY_CONFIG, build_tokenizer
    from trainers.runtime import check_prompt_lengths

    longest = check_prompt_lengths(
        load_task("arithmetic", {}).train, build_tokenizer(TINY_CONFIG["vocab_size"]), 10**6
    )
    assert longest > 16
    assert all(
        d.startswith(
            f"max_prompt_length: the task's longest prompt is {longest} tokens, over the limit of 16"
        )
        for d in failed.status_detail
    ), failed.status_detail.tolist()
    done = trials[trials.status == "completed"]
    assert (done.steps_completed == 2).all()
    # probe_steps 1 of max_steps 2: a trial's median speed is its one regular step's, in the steps dataset
    steps = pq.read_table(outcome.output_dir / "steps").to_pylist()
    regular = {r["trial_key"]: r["tokens_per_s"] for r in steps if r["step"] == 2 and not r["probe"]}
    assert sorted(regular) == sorted(done.trial_key) and all(v > 0 for v in regular.values())
    assert dict(zip(done.trial_key, done.median_tokens_per_s, strict=True)) == regular
    assert done.versions.map(lambda v: "torch" in json.loads(v)).all()
    assert done.effective_config.map(lambda v: json.loads(v)["num_generations"] == 4).all()

    # Two trials at once, each on its own (fake) GPU.
    assert set(trials.cuda_visible_devices) == {"0", "1"}
    rows = trials.sort_values("started_at").to_dict("records")
    overlapping = [
        (a, b) for i, a in enumerate(rows) for b in rows[i + 1 :] if b["started_at"] < a["ended_at"]
    ]
    assert overlapping and all(a["cuda_visible_devices"] != b["cuda_visible_devices"] for a, b in overlapping)

    # Tune reuses a worker for a later trial; each trial still gets a fresh trainer child, and a trial's
    # outcome is its own (a long prompt fails whatever ran in the worker before).
    trials["worker"] = trials.trial_key.map(lambda k: processes[k][0])
    trials["trainer"] = trials.trial_key.map(lambda k: processes[k][1])
    assert trials.worker.nunique() < len(trials)
    for _, shared in trials.groupby("worker"):
        assert shared.trainer.nunique() == len(shared) and not set(shared.trainer) & set(shared.worker)
        assert shared.cuda_visible_devices.nunique() == 1  # the worker keeps the GPU it holds
    prompt_limit = trials.config.map(lambda c: json.loads(c)["max_prompt_length"])
    assert (trials.status == prompt_limit.map({96: "completed", 16: "failed"})).all()

    # The steps dataset reads the same in pandas, polars and duckdb.
    steps_dir = outcome.output_dir / "steps"
    by_pandas = pd.read_parquet(steps_dir)
    by_polars = pl.read_parquet(f"{steps_dir}/**/*.parquet", hive_partitioning=True)
    by_duckdb = duckdb.sql(
        f"select count(*) from read_parquet('{steps_dir}/**/*.parquet', hive_partitioning=1)"
    )
    assert len(by_pandas) == len(by_polars) == by_duckdb.fetchall()[0][0] == 4
    assert set(by_pandas["stack"].astype(str)) == {"trl"}

    # MLflow agrees with Parquet: same keys, same step counts, one parent.
    client, parents, children = trial_runs(uri, "fakegpu")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert sorted(r.data.tags["rlsweep.trial_key"] for r in children) == sorted(trials.trial_key)
    for run in children:
        assert run.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        row = trials[trials.trial_key == run.data.tags["rlsweep.trial_key"]].iloc[0]
        assert run.data.tags["status"] == row.status
        history = client.get_metric_history(run.info.run_id, "step/step_s")
        assert len(history) == row.steps_completed
        assert run.data.params["mode"] == row["mode"]

    # The report from this real sweep: files, images of its trials, and MLflow's comparison metrics.
    assert main(["report", str(outcome.output_dir)]) == 0
    statuses = sorted(zip(trials.trial_key, trials.status, strict=True))
    summary = pd.read_csv(outcome.output_dir / "summary.csv")
    assert sorted(zip(summary.run_name, summary.status, strict=True)) == statuses
    failed_rows = sorted((key, "failed") for key in failed.trial_key)
    markdown = (outcome.output_dir / "report.md").read_text()
    assert f"4 trials: {len(done)} completed, {len(failed)} failed." in markdown.splitlines()
    header, rows = md_table_after(markdown, "## Trials that did not complete")
    assert sorted((row[header.index("Trial")], row[header.index("Outcome")]) for row in rows) == failed_rows
    pngs = sorted((outcome.output_dir / "plots").glob("*.png"))
    assert pngs
    for png in pngs:
        assert_varied_png(png)
    html = (outcome.output_dir / "report.html").read_text()
    assert all(key in html for key in done.trial_key)
    header, rows = html_table_after(outline(html), "Trials that did not complete")
    assert sorted((row[header.index("Trial")], row[header.index("Outcome")]) for row in rows) == failed_rows
    _, parents, children = trial_runs(uri, "fakegpu")
    artifacts = {a.path for a in client.list_artifacts(parents[0].info.run_id)}
    assert {"summary.csv", "report.html", "plots"} <= artifacts
    # MLflow's figures are trials.parquet's: a trial's peak is the first measured of GPU, torch reserved,
    # RSS (a CPU host measures RSS only); the sweep's best/ figures are the best over completed trials.
    peaks = done[["peak_device_gib", "peak_torch_reserved_gib", "peak_rss_gib"]].bfill(axis=1).iloc[:, 0]
    peak_of = dict(zip(done.trial_key, peaks, strict=True))
    figures = {
        r.data.tags["rlsweep.trial_key"]: (
            r.data.metrics["median_tokens_per_s"],
            r.data.metrics["peak_memory_gib"],
        )
        for r in children
        if r.data.tags["status"] == "completed"
    }
    assert figures == {key: (regular[key], peak_of[key]) for key in done.trial_key}
    best = {
        k: v for k, v in client.get_run(parents[0].info.run_id).data.metrics.items() if k.startswith("best/")
    }
    assert best["best/median_tokens_per_s"] == max(regular.values())
    assert best["best/median_step_s"] == min(done.median_step_s)
    assert best["best/peak_memory_gib"] == min(peaks)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_mlflow_down_sweep_completes_then_sync_fills_it(ray_fake_gpus, tmp_path, capsys):
    path = tiny_sweep(
        tmp_path / "s.yaml",
        "mlflowdown",
        {"mode": ["grpo", "gspo"]},
        tracking={"mlflow_uri": f"http://127.0.0.1:{_closed_port()}"},
    )

    def prune_gspo(spec):  # the pruning hook decides without starting a trainer
        return "dominated by a test trial (oom at 1.0 GiB)" if spec.mode == "gspo" else RUN

    outcome = run_sweep(load_sweep(path), output_dir=tmp_path / "out", decide=prune_gspo)
    trials = pq.read_table(outcome.output_dir / "trials.parquet").to_pandas().set_index("mode")
    assert trials.loc["grpo", "status"] == "completed"
    assert trials.loc["gspo", "status"] == "pruned"
    assert not (outcome.output_dir / "trials" / trials.loc["gspo", "trial_key"]).exists(), (
        "no trainer for pruned"
    )
    assert "sync-mlflow" in capsys.readouterr().err

    uri = f"sqlite:///{tmp_path}/synced.db"
    for _ in range(2):  # idempotent: the second sync finds everything there
        assert main(["sync-mlflow", str(outcome.output_dir), "--tracking-uri", uri]) == 0
    assert "logged 0 trial run(s), 2 already there" in capsys.readouterr().out
    client, parents, children = trial_runs(uri, "mlflowdown")
    assert len(parents) == 1
    assert sorted(r.data.tags["rlsweep.trial_key"] for r in children) == sorted(trials.trial_key)
    grpo = next(r for r in children if r.data.params["mode"] == "grpo")
    assert len(client.get_metric_history(grpo.info.run_id, "step/step_s")) == 2
    assert client.list_artifacts(grpo.info.run_id)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.heavy
def test_sigkill_driver_then_resume(ray_fake_gpus, tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    out = tmp_path / "out"
    path = tiny_sweep(
        tmp_path / "s.yaml",
        "killresume",
        {"num_generations": [2, 3, 4]},
        tracking={"mlflow_uri": uri},
        fixed={"max_steps": 4},
    )
    driver = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "run", str(path), "--output-dir", str(out)],
        cwd=Path(__file__).parents[2],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "RAY_ADDRESS": ""},
    )
    ray_processes: list[psutil.Process] = []  # the driver's local Ray, left behind by its SIGKILL
    ray_dirs: set[Path] = set()  # and its private temp folder
    try:
        # Wait until one trial is in the ledger and another trainer is running, then SIGKILL the driver.
        deadline = time.monotonic() + 240
        running: list[int] = []
        while time.monotonic() < deadline:
            ledger = out / "trials.parquet"
            finished = (
                set(pq.read_table(ledger).column("trial_key").to_pylist()) if ledger.exists() else set()
            )
            running = [
                int(p.read_text())
                for p in out.glob("trials/*/trainer.pid")
                if p.parent.name not in finished and _alive(int(p.read_text()))
            ]
            if finished and running:
                break
            time.sleep(0.5)
        assert finished and running, "the sweep did not reach the point of interruption"
        ray_processes = descendants(driver.pid)
        ray_dirs = private_ray_dirs(ray_processes)
        assert ray_dirs, [p.cmdline() for p in ray_processes]
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        deadline = time.monotonic() + 60
        while any(_alive(pid) for pid in running) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not any(_alive(pid) for pid in running), "a trainer outlived the driver"
    finally:
        if driver.poll() is None:
            ray_processes += descendants(driver.pid)
            driver.kill()
        kill_trees(ray_processes)
        for folder in ray_dirs:
            shutil.rmtree(folder, ignore_errors=True)

    before = pq.read_table(out / "trials.parquet").to_pandas()
    outcome = run_sweep(load_sweep(path), output_dir=out)
    assert not set(outcome.ran) & set(before.trial_key[before.status == "completed"]), (
        "finished trials re-ran"
    )
    trials = pq.read_table(out / "trials.parquet").to_pandas()
    assert len(trials) == trials.trial_key.nunique() == 3
    assert (trials.status == "completed").all() and (trials.steps_completed == 4).all()
    steps = pd.read_parquet(out / "steps")
    assert sorted(steps.groupby("trial_key").size().tolist()) == [4, 4, 4], "nothing lost, nothing doubled"
    client, parents, children = trial_runs(uri, "killresume")
    assert len(parents) == 1
    assert sorted(r.data.tags["rlsweep.trial_key"] for r in children) == sorted(trials.trial_key), (
        "one MLflow run per trial"
    )


def test_a_piped_run_talks_while_it_runs_then_ctrl_c_stops_it_cleanly_and_says_how_to_resume(tmp_path):
    out = tmp_path / "out"
    path = tiny_sweep(
        tmp_path / "s.yaml",
        "ctrlc",
        {"num_generations": [2, 4]},
        tracking={"enabled": False},
        fixed={"max_steps": 50},
    )
    driver = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "run", str(path), "--output-dir", str(out)],
        cwd=Path(__file__).parents[2],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "RAY_ADDRESS": "", "RLSWEEP_HEARTBEAT_S": "1"},
    )
    ray_processes: list[psutil.Process] = []  # the driver's local Ray and trainers, if it leaves them
    try:
        deadline = time.monotonic() + 180
        running: list[int] = []
        while not running and time.monotonic() < deadline:
            events = list(out.glob("trials/*/events.jsonl"))
            if any('"step"' in e.read_text() for e in events):
                running = [int(p.read_text()) for p in out.glob("trials/*/trainer.pid")]
            time.sleep(0.5)
        assert running, "no trainer started"
        ray_processes = descendants(driver.pid)
        driver.send_signal(signal.SIGINT)
        _, err = driver.communicate(timeout=120)
        survivors = [pid for pid in running if _alive(pid)]  # before the cleanup below kills any
    finally:
        if driver.poll() is None:
            ray_processes += descendants(driver.pid)
            driver.kill()
        kill_trees(ray_processes)
    assert driver.returncode == 130
    assert "Resume with:" in err and "--output-dir" in err
    # Piped output talks: a line as each trial starts, a heartbeat while it runs (its 50 steps are slow
    # to come: the trainer starts in seconds, the heartbeat is every second).
    assert re.search(r"^start \[1/2\] trl-grpo-tiny-k[24]-b1-", err, re.M), err
    assert re.search(r"^  trl-grpo-tiny-\S+: running \d+ s, (no step yet|step \d+/50, ETA)", err, re.M), err
    assert not survivors, "children are killed"
    trials = pq.read_table(out / "trials.parquet").to_pandas()
    assert "stopped" in set(trials.status)
    assert trials[trials.status == "stopped"].status_detail.str.contains("resumed sweep runs it again").all()
