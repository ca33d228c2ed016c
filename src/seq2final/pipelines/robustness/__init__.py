"""Read a family's members together: robustness slopes and history's value against intensity."""

from seq2final.pipelines.robustness.pipeline import create_pipeline

__all__ = ["create_pipeline"]
