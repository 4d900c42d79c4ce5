"""Recording trials: the trial outcome, the recorder and its sinks (Parquet, MLflow), storage, the output-dir lock, the sweep's finish."""
