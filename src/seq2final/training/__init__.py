"""Training: the engine, the one fit loop, its loss terms and callbacks, tuning, metrics.

A new method needs only what is exported here (docs/extending.md): the :class:`Task` a fit
trains, a :class:`LossTerm` registered with :func:`loss_term` for a new part of the loss, a
:class:`FitCallback` for what it does at named points of the loop, an
:class:`OptimizerRecipe` registered with :func:`optimizer` for how it updates the weights, the
data splits, :func:`clone_model` to start a fit from an earlier model, and :func:`objective_loss`
and :func:`accuracy` to compute what the loop does.
"""

from seq2final.training.callbacks import FitCallback, FitState
from seq2final.training.engine import Engine, accuracy, layer_inputs, predict_logits
from seq2final.training.epochs import FitResult
from seq2final.training.hyperparameters import HyperParameters
from seq2final.training.loop import clone_model, fit
from seq2final.training.objectives import Task, objective_loss
from seq2final.training.optimizers import OPTIMIZERS, OptimizerRecipe, optimizer
from seq2final.training.search import Budget, SearchSpace
from seq2final.training.tensors import TensorSplit
from seq2final.training.terms import LOSS_TERMS, Batch, LossInputs, LossTerm, loss_term
from seq2final.training.wrappers import ModelWrapper

__all__ = [
    "LOSS_TERMS", "OPTIMIZERS", "Batch", "Budget", "Engine", "FitCallback", "FitResult", "FitState",
    "HyperParameters", "LossTerm", "LossInputs", "ModelWrapper", "OptimizerRecipe", "SearchSpace",
    "Task", "TensorSplit", "accuracy", "clone_model", "fit", "layer_inputs", "loss_term",
    "objective_loss", "optimizer", "predict_logits",
]  # fmt: skip
