"""Result records for tests of what reads them (tables, comparisons, the run's table)."""

from __future__ import annotations

from seq2final.training.records import RECORD_FORMAT, ResultRecord


def make_record(**fields) -> ResultRecord:
    """A result record of a finished ``baseline`` job, with ``fields`` in place of its values."""
    method = fields.get("method", "baseline")
    defaults = {
        "format": RECORD_FORMAT, "job_key": f"seq.convnet_4.{method}.smoke.0", "sequence": "seq",
        "sequence_key": "seq-key", "dataset": "digits", "arch": "convnet_4", "method": method,
        "paper_name": method, "paper_class": None, "historical": "none", "final": "scratch",
        "historical_state": None, "seed": 0, "budget": "smoke", "test_accuracy": 0.5,
        "worst_class_accuracy": 0.3, "test_nll": 1.0, "ece": 0.1, "valid_accuracy": 0.5,
        "epochs": 1, "trials": 1, "wall_seconds": 1.0, "device": "cpu", "parameters": 10,
        "test_size": 20, "hyperparameters": {}, "engine": {}, "fits": [], "train_flops": 1,
        "eval_flops": 1, "inference_flops_per_image": 1,
    }  # fmt: skip
    return ResultRecord.model_validate({**defaults, **fields})
