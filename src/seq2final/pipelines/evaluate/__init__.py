"""Gather a sequence's result records into the paper's tables."""

from seq2final.pipelines.evaluate.pipeline import create_pipeline

__all__ = ["create_pipeline"]
