"""Runs: plans, keys, the recipes a run carries out, and the Kedro stores that keep the results."""
