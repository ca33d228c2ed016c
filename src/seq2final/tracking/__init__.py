"""Tracking: job runs in MLflow, the summary run of a sequence, and the registered pyfunc model."""
