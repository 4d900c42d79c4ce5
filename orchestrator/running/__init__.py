"""Running trials: the Ray Tune driver, the supervisor of one trainer child, its memory sampling and guard, the phases and the settled stop, cluster submission, gpu-check."""
