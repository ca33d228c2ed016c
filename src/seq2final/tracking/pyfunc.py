"""The pyfunc face of an adapted model, as MLflow serves and loads it.

Without postponed annotations: MLflow reads ``predict``'s type
hints at class creation to decide how to validate inputs.
"""

from pathlib import Path
from typing import Any

import mlflow.pyfunc
import numpy as np
import torch
from mlflow.models import Model, ModelSignature
from mlflow.pyfunc.model import PythonModel
from mlflow.types import Schema, TensorSpec

from seq2final.core.errors import Seq2FinalError
from seq2final.core.plugins import load_plugins
from seq2final.models.storage import unpack
from seq2final.tracking.mlflow_io import quiet_model_logging, requirements
from seq2final.training.engine import Engine, predict_logits
from seq2final.training.tensors import TensorSplit


class ImageClassifier(PythonModel):
    """The pyfunc face of an adapted model: uint8 images in, class probabilities out.

    Users hold images as N×H×W×C (NumPy, PIL) or N×C×H×W (PyTorch) uint8 arrays; both are taken,
    told apart by the training images' shape, and scaled exactly as in training, so the registered
    model predicts what the in-memory model predicts.
    """

    def __init__(
        self,
        image_shape: tuple[int, int, int],
        input_scale: str,
        step: int | None,
        plugins: tuple[str, ...] = (),
    ):
        self.image_shape = tuple(image_shape)  # C, H, W
        self.input_scale = input_scale
        self.step = step
        self.plugins = tuple(plugins)  # a plugin's architecture must be registered to rebuild
        self._model: torch.nn.Module | None = None

    def load_context(self, context: Any) -> None:
        load_plugins(getattr(self, "plugins", ()))  # models pickled before plugins had none
        payload = torch.load(context.artifacts["model"], map_location="cpu", weights_only=True)
        self._model = unpack(payload).eval()

    def to_nchw(self, images: np.ndarray) -> np.ndarray:
        channels, height, width = self.image_shape
        images = np.asarray(images)
        if images.dtype != np.uint8 or images.ndim != 4:
            raise Seq2FinalError(
                f"expected uint8 images N×H×W×C or N×C×H×W, got {images.dtype} {images.shape}"
            )
        if images.shape[1:] == (channels, height, width):
            return images
        if images.shape[1:] == (height, width, channels):
            return images.transpose(0, 3, 1, 2)
        raise Seq2FinalError(
            f"expected images of {height}×{width}×{channels} or {channels}×{height}×{width}, "
            f"got {images.shape[1:]}"
        )

    def predict(
        self, context: Any, model_input: np.ndarray, params: dict[str, Any] | None = None
    ) -> np.ndarray:
        if self._model is None:
            raise Seq2FinalError("the model's weights are not loaded (load it through MLflow)")
        return predict_probabilities(
            self._model, self.to_nchw(model_input), self.input_scale, self.step
        )


def save_pyfunc_model(
    path: Path,
    model_file: Path,
    example: np.ndarray,
    num_classes: int,
    input_scale: str,
    step: int | None,
    plugins: tuple[str, ...] = (),
    mlflow_model: Model | None = None,
) -> None:
    """Save a stored model as an MLflow pyfunc model in ``path``: uint8 images of the example's
    shape in (either layout), ``num_classes`` probabilities out, its requirements pinned
    (``mlflow_model``: the ``MLmodel`` metadata to start from, such as its logged model's id)."""
    classifier = ImageClassifier(tuple(example.shape[1:]), input_scale, step, plugins)
    signature = ModelSignature(
        inputs=Schema([TensorSpec(np.dtype(np.uint8), (-1, -1, -1, -1))]),
        outputs=Schema([TensorSpec(np.dtype(np.float32), (-1, num_classes))]),
    )
    with quiet_model_logging():
        mlflow.pyfunc.save_model(
            path,
            python_model=classifier,
            artifacts={"model": str(model_file)},
            signature=signature,
            input_example=example.transpose(0, 2, 3, 1),
            pip_requirements=requirements(),
            mlflow_model=mlflow_model,
        )


def predict_probabilities(
    model: torch.nn.Module, images: np.ndarray, input_scale: str, step: int | None
) -> np.ndarray:
    """Class probabilities of uint8 N×C×H×W images, as the test evaluation computes logits."""
    data = TensorSplit.from_arrays(images, np.zeros(len(images), dtype=np.int64))
    device = next(model.parameters()).device
    engine = Engine.model_validate({"input_scale": input_scale, "device": str(device)})
    logits = predict_logits(model, data, engine, step)
    return torch.softmax(logits, dim=1).numpy()
