"""Fit the data-efficiency curves of a run's historical states."""

from seq2final.pipelines.representations.pipeline import create_pipeline

__all__ = ["create_pipeline"]
