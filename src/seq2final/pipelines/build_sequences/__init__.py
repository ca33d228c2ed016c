"""Build a sequence of shifted datasets and persist it step by step."""

from seq2final.pipelines.build_sequences.pipeline import create_pipeline

__all__ = ["create_pipeline"]
