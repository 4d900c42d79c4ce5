"""Recording trials: the recorder and its Parquet sinks (the MLflow sink is orchestrator/publishing)."""
