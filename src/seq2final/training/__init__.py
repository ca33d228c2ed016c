"""Training: the engine, the objectives and their penalties, the one fit loop, tuning, metrics.

A new mode needs only what is exported here: the :class:`Task` a fit trains, the data splits,
and :func:`clone_model` to start a fit from an earlier model.
"""

from seq2final.training.engine import Engine, predict_logits
from seq2final.training.loop import FitResult, clone_model, fit
from seq2final.training.objectives import HyperParameters, Task
from seq2final.training.search import Budget, SearchSpace
from seq2final.training.tensors import TensorSplit

__all__ = [
    "Budget", "Engine", "FitResult", "HyperParameters", "SearchSpace", "Task", "TensorSplit",
    "clone_model", "fit", "predict_logits",
]  # fmt: skip
