"""Where preprocessing runs and what it reads: the Ray engine of
``megadata-preprocess --engine ray`` and parquet input (pyarrow)."""
