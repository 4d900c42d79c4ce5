"""The report's and MLflow's predicted-vs-measured views on synthetic sweeps whose predictions are the
measured peaks times known factors, so every error is known in advance."""

import pytest
from mlflow.tracking import MlflowClient
from rich.console import Console

from orchestrator.publishing.finish import finish_sweep
from orchestrator.publishing.tracking import MlflowSink
from orchestrator.views.report import load_outputs, prediction_metrics, prediction_pairs, write_report
from orchestrator.views.report._predictions import error_table, terms_table
from tests.helpers.images import assert_varied_png
from tests.helpers.synthetic_sweep import add_predictions, write_synthetic_sweep
from trainers.trial import TrialSpec

# Predicted = measured x factor: the error is (factor - 1) as % of the measured peak.
TRL = {
    "trl-grpo-k2-b1-s1": 1.04,
    "trl-grpo-k2-b1-s2": 0.98,
    "trl-grpo-k2-b2-s1": 1.10,
    "trl-grpo-k4-b1-s1": 0.92,
}
UNSLOTH = {"unsloth-grpo-k2-b1-s1": 1.01, "unsloth-grpo-k4-b2-s1": 0.97}
NOT_SCORED = {"trl-grpo-k4-b2-s1": 1.2, "trl-grpo-k8-b2-s1": 1.0}  # oom (a lower bound) and pruned
FACTORS = {**TRL, **UNSLOTH, **NOT_SCORED}
SPREAD = 0.05  # the interval: ± 5% of the prediction


def _errors(factors: dict[str, float]) -> list[float]:
    return [100.0 * (f - 1.0) for f in factors.values()]


def _inside(factors: dict[str, float]) -> int:
    # measured = predicted / f lies in [predicted (1 - SPREAD), predicted (1 + SPREAD)]
    return sum(1 - SPREAD <= 1 / f <= 1 + SPREAD for f in factors.values())


def _console() -> Console:
    return Console(record=True, width=200, force_terminal=False)


@pytest.fixture
def predicted(tmp_path):
    trials = write_synthetic_sweep(tmp_path)
    add_predictions(tmp_path, trials, FACTORS, SPREAD)
    return tmp_path


def test_the_error_table_by_family_matches_the_factors_the_predictions_were_made_with(predicted):
    outputs = load_outputs(predicted)
    table = error_table(prediction_pairs(outputs.trials, outputs.steps)).set_index("Family")
    families = {"trl": TRL, "unsloth": UNSLOTH, "all": {**TRL, **UNSLOTH}}
    assert [label.split()[0] for label in table.index] == list(families)
    for (label, row), factors in zip(table.iterrows(), families.values(), strict=True):
        errors = _errors(factors)
        assert row["Trials scored"] == len(factors), label
        assert row["Mean |error| (% of measured)"] == pytest.approx(
            sum(map(abs, errors)) / len(errors), abs=0.01
        )
        assert row["Worst |error| (%)"] == pytest.approx(max(map(abs, errors)), abs=0.01)
        assert row["Mean signed error (%)"] == pytest.approx(sum(errors) / len(errors), abs=0.01)
        assert row["Worst under-prediction (%)"] == pytest.approx(max(0.0, -min(errors)), abs=0.01)
        assert row["Measured inside the interval"] == f"{_inside(factors)} of {len(factors)}"


def test_an_oom_trial_is_plotted_but_not_scored_and_a_trial_without_a_prediction_is_left_out(predicted):
    outputs = load_outputs(predicted)
    pairs = prediction_pairs(outputs.trials, outputs.steps).set_index("trial_key")
    assert set(pairs.index) == set(FACTORS)  # the failed, unavailable and stopped trials had none
    assert (
        pairs.loc["trl-grpo-k4-b2-s1", "status"] == "oom" and pairs["error_pct"].isna()["trl-grpo-k4-b2-s1"]
    )
    assert pairs.loc["trl-grpo-k2-b2-s1", "error_pct"] == pytest.approx(10.0)


def test_the_report_shows_the_scatter_the_error_table_and_the_fitted_terms(predicted):
    paths = write_report(predicted, console=_console(), budget_gib=10.0)
    md = paths["report_md"].read_text()
    section = md[md.index("## Predicted vs measured peak") : md.index("## Trials that did not complete")]
    assert "8 trials had a peak predicted before they ran" in section
    assert "6 completed with a measured peak and are scored" in section
    assert "![Predicted vs measured peak](plots/predicted_vs_measured.png)" in section
    assert "| all families | 6 | 4.7 | 10.0 | 0.3 | 8.0 | 4 of 6 |" in section
    assert "### Where the memory goes: fitted terms per family (GiB)" in section
    assert_varied_png(predicted / "plots" / "predicted_vs_measured.png")
    assert paths["prediction_errors_csv"].read_text().splitlines()[0].startswith("Family,Trials scored,")
    assert predicted / "plots" / "predicted_vs_measured.png" in paths["plots"]


def test_the_fitted_terms_add_up_to_each_familys_prediction_at_its_largest_trial(predicted):
    terms = terms_table(load_outputs(predicted).trials)
    assert [label.split()[0] for label in terms["Family"]] == ["trl", "unsloth"]
    assert list(terms["Trials measured"]) == [4, 2]
    assert list(terms["OOM or timeout trials (lower bounds)"]) == [1, 0]
    for _, row in terms.iterrows():
        parts = sum(float(row[f"{p} (GiB)"]) for p in ("Static", "Generation", "Training"))
        assert parts == pytest.approx(float(row["Sum (GiB)"]), abs=0.015)


def test_a_sweep_without_predictions_says_none_were_made_and_draws_no_plot(tmp_path):
    write_synthetic_sweep(tmp_path)
    paths = write_report(tmp_path, console=_console())
    md = paths["report_md"].read_text()
    assert "No trial of this sweep has a predicted peak: no prediction was made." in md
    assert not (tmp_path / "plots" / "predicted_vs_measured.png").exists()
    assert paths["prediction_errors_csv"] is None and not (tmp_path / "prediction_errors.csv").exists()


def test_a_trial_runs_prediction_metrics_are_its_predicted_figures_and_error():
    row = {"status": "completed", "peak_rss_gib": 2.0, "predicted_peak_gib": 2.1, "predicted_low_gib": 1.9,
           "predicted_high_gib": 2.3, "predicted_from_trials": 3, "predicted_basis": "fitted"}  # fmt: skip
    metrics = prediction_metrics(row)
    assert metrics == pytest.approx(
        {
            "predicted_peak_gib": 2.1,
            "predicted_low_gib": 1.9,
            "predicted_high_gib": 2.3,
            "predicted_from_trials": 3.0,
            "prediction_error_gib": 0.1,
            "prediction_error_pct": 5.0,
        }  # fmt: skip
    )
    assert "prediction_error_pct" not in prediction_metrics({**row, "status": "oom"})
    assert prediction_metrics({"status": "completed", "peak_rss_gib": 2.0, "predicted_peak_gib": None}) == {}


def test_mlflow_gets_each_trials_prediction_and_the_sweeps_errors(tmp_path):
    trials = add_predictions(tmp_path, write_synthetic_sweep(tmp_path, gpu=False), FACTORS, SPREAD)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sink = MlflowSink(uri, "pred", tmp_path, "pred")
    sink.start_sweep("name: pred\n")
    key = "trl-grpo-k2-b2-s1"
    row = trials.set_index("trial_key").loc[key].to_dict() | {"trial_key": key}
    spec = TrialSpec(trial_key=key)
    sink.on_start(spec)
    sink.on_end(spec, row, [])
    finish_sweep(tmp_path, console=_console(), mlflow=sink, counts={"completed": 1})

    client = MlflowClient(uri)
    run = client.search_runs([sink.experiment_id], filter_string=f"tags.`rlsweep.trial_key` = '{key}'")[0]
    assert run.data.metrics["predicted_peak_gib"] == pytest.approx(row["peak_rss_gib"] * TRL[key])
    assert run.data.metrics["prediction_error_pct"] == pytest.approx(100.0 * (TRL[key] - 1.0))
    assert run.data.metrics["predicted_from_trials"] == 2
    parent = client.get_run(sink.parent_id).data.metrics
    errors = _errors({**TRL, **UNSLOTH})
    assert parent["prediction_trials_scored"] == len(errors)
    assert parent["prediction_mean_abs_error_pct"] == pytest.approx(
        sum(map(abs, errors)) / len(errors), abs=0.01
    )
    assert parent["prediction_worst_under_prediction_pct"] == pytest.approx(-min(errors), abs=0.01)
    assert "prediction_errors.csv" in {a.path for a in client.list_artifacts(sink.parent_id)}
