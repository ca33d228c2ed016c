"""Runs: plans, keys, the training of a run's states and jobs, and the Kedro stores that keep them."""
