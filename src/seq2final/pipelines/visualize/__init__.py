"""Draw a sequence's finished jobs as the paper's figures."""

from seq2final.pipelines.visualize.pipeline import create_pipeline

__all__ = ["create_pipeline"]
