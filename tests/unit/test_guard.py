"""One default per guard setting: `rlsweep trial`'s flags and a sweep's sections agree."""

from orchestrator.cli import build_parser
from orchestrator.cli._common import trial_guard
from orchestrator.running.telemetry import MemorySampler
from orchestrator.spec.load import parse_sweep
from orchestrator.words.settings import DEFAULT_GUARD_MARGIN_GIB, GuardSettings


def test_the_trial_cli_defaults_equal_a_sweeps_defaults():
    cli = trial_guard(build_parser().parse_args(["trial"]))
    sweep = parse_sweep({"name": "defaults"}).guard()
    assert cli == sweep == GuardSettings()


def test_on_each_host_kind_both_give_the_sampler_the_same_margin():
    cli = trial_guard(build_parser().parse_args(["trial"]))
    sweep = parse_sweep({"name": "defaults"}).guard()
    for backend, margin in (("nvml", DEFAULT_GUARD_MARGIN_GIB), ("psutil", DEFAULT_GUARD_MARGIN_GIB)):
        margins = []
        for guard in (cli, sweep):
            sampler = MemorySampler(1, margin_gib=guard.margin_gib, hz=guard.sample_hz)
            sampler.backend = backend  # what start() records for the host kind
            margins.append(sampler.margin_gib)
        assert margins == [margin, margin]


def test_trial_flags_carry_their_settings_into_the_guard():
    args = "trial --memory-budget-gib 2 --memory-margin-gib 0.25 --sample-hz 50 --timeout-s 9 --probe-steps 0"
    assert trial_guard(build_parser().parse_args(args.split())) == GuardSettings(
        budget_gib=2.0, margin_gib=0.25, sample_hz=50.0, timeout_s=9.0, probe_steps=0
    )


def test_trial_help_shows_the_shared_defaults(capsys):
    parser = build_parser()
    trial = parser._subparsers._group_actions[0].choices["trial"]
    text = " ".join(trial.format_help().split())
    defaults = GuardSettings()
    assert f"(default: {defaults.timeout_s:g})" in text and f"(default: {defaults.sample_hz:g})" in text
    assert f"over the budget in GiB (default: {DEFAULT_GUARD_MARGIN_GIB:g})" in text
    assert f"(default: {defaults.probe_steps!r})" in text
