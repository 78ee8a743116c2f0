"""Experiment trackers: finished run and sweep folders logged to an MLflow tracking server (`--track URI`,
`effbench track`), and read back as records for the leaderboard (`effbench report --from-tracking`).

payload.py is pure (a run folder -> what is logged, no MLflow import); mlflow_store.py is the one module that
imports MLflow, lazily, and only once a run folder is final: the tracker is never in the measured path.
"""
