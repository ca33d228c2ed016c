"""Fit each selected method's final mode, evaluate it on the final test set, record the result."""

from seq2final.pipelines.adapt_final.pipeline import create_pipeline

__all__ = ["create_pipeline"]
