"""Measure how far each step of a sequence is from the final distribution."""

from seq2final.pipelines.quantify_shift.pipeline import create_pipeline

__all__ = ["create_pipeline"]
