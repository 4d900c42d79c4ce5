"""Publishing a sweep: its MLflow runs (tracking, a recorder sink that also logs the report's figures)
and the end of a sweep (finish: the report written, then logged). Above views, since what it publishes
includes the report."""
