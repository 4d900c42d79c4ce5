"""Where a sweep's node-local files go: in the output dir when it is a folder, else in a folder of the
run's own, so two runs of one sweep name never share trial folders."""

from pathlib import Path

from orchestrator.words.storage import local_dir, output_location


def test_a_folder_output_holds_its_own_scratch(tmp_path):
    assert local_dir(output_location(str(tmp_path)), "smoke") == tmp_path


def test_two_runs_of_one_sweep_to_an_object_store_get_scratch_folders_of_their_own():
    # Two sweeps named alike, to the same object-store path (as two test sessions with a fake S3 each):
    # trial keys are equal, so shared scratch would mix their trainers' events.
    remote = output_location("mock://bucket/out")
    first, second = local_dir(remote, "smoke"), local_dir(remote, "smoke")
    assert first != second
    for folder in (first, second):
        assert folder.is_dir() and folder.name.startswith("rlsweep-smoke-") and not any(folder.iterdir())
        assert Path(folder).parent == Path(first).parent
        folder.rmdir()
