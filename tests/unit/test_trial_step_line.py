"""`rlsweep trial`'s per-step line names the memory its peak is."""

from orchestrator.cli.trial import _step_line
from trainers.trial import TrialSpec


def test_the_step_line_labels_the_peak_with_the_memory_it_measured():
    spec = TrialSpec(max_steps=3)
    gpu = {"step": 1, "device_peak_gib": 5.5, "torch_peak_reserved_gib": 5.0, "rss_peak_gib": 1.25}
    assert _step_line(spec, gpu).endswith("peak 5.50 GiB GPU (NVML)")
    assert _step_line(spec, {"step": 1, "torch_peak_reserved_gib": 5.0}).endswith(
        "peak 5.00 GiB torch reserved"
    )
    assert _step_line(spec, {"step": 2, "rss_peak_gib": 0.7}).endswith("peak 0.70 GiB RSS (CPU run)")
    assert _step_line(spec, {"step": 3}).endswith("peak -")


def test_the_step_line_says_how_a_probe_step_probed_and_which_phase_set_its_peak():
    spec = TrialSpec(max_steps=2)
    synthetic = {"step": 1, "probe": True, "probe_kind": "synthetic", "peak_phase": "training"}
    assert _step_line(spec, synthetic).startswith("step 1/2 probe (synthetic: peak in training)  ")
    assert _step_line(spec, {"step": 1, "probe": True}).startswith("step 1/2 probe  ")
    assert _step_line(spec, {"step": 2, "probe": False, "probe_kind": None}).startswith("step 2/2  ")
