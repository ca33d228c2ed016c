"""Train (or reuse) the historical state each selected method starts the final step from."""

from seq2final.pipelines.pretrain_historical.pipeline import create_pipeline

__all__ = ["create_pipeline"]
