"""A final model with an output transform: scored, stored and served as the pair it is."""

import mlflow
import numpy as np
import pytest
import torch
from torch import nn

from seq2final.core.errors import UnknownNameError
from seq2final.models import (
    JointModel,
    TemperatureScaling,
    TransformedModel,
    build_model,
    set_dropout,
)
from seq2final.models.storage import pack, unpack
from seq2final.tracking.pyfunc import predict_probabilities, save_pyfunc_model
from seq2final.training.engine import Engine, predict_logits
from seq2final.training.tensors import TensorSplit


def _images(n: int = 6) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 255, (n, 3, 32, 32), dtype=np.uint8)


def _scaled(network: nn.Module, temperature: float) -> TransformedModel:
    scaling = TemperatureScaling()
    with torch.no_grad():
        scaling.temperature.fill_(temperature)
    return TransformedModel(network, scaling).eval()


def test_a_temperature_divides_the_logits_and_moves_no_prediction():
    torch.manual_seed(0)
    network = build_model("convnet_1", 10).eval()
    model = _scaled(network, 2.5)
    data = TensorSplit.from_arrays(_images(), np.zeros(6, dtype=np.int64))
    logits = predict_logits(network, data, Engine())
    scaled = predict_logits(model, data, Engine())
    assert torch.allclose(scaled, logits / 2.5)
    assert torch.equal(scaled.argmax(1), logits.argmax(1))


@pytest.mark.parametrize("joint", [False, True])
def test_stored_and_loaded_it_is_the_same_pair_block_or_joint(joint):
    torch.manual_seed(0)
    network = (JointModel("convnet_2", 10, 3, [["layer1", "fc"], ["fc"]]) if joint
               else build_model("convnet_1", 10))  # fmt: skip
    model = _scaled(network.eval(), 0.7)
    back = unpack(pack(model))
    assert isinstance(back, TransformedModel) and back.transform_name == "temperature"
    assert type(back.network) is type(network)
    assert back.transform.temperature.item() == pytest.approx(0.7)
    data = TensorSplit.from_arrays(_images(), np.zeros(6, dtype=np.int64))
    step = 2 if joint else None
    assert torch.equal(predict_logits(back, data, Engine(), step),
                       predict_logits(model, data, Engine(), step))  # fmt: skip


def test_served_by_mlflow_it_predicts_the_transformed_probabilities(tmp_path):
    torch.manual_seed(0)
    model = _scaled(build_model("convnet_1", 10).eval(), 3.0)
    torch.save(pack(model), tmp_path / "model.pt")
    images = _images()
    save_pyfunc_model(tmp_path / "served", tmp_path / "model.pt", images[:2], 10, "unit", None)
    served = mlflow.pyfunc.load_model(str(tmp_path / "served")).predict(images)
    expected = predict_probabilities(model, images, "unit", None)
    assert np.allclose(served, expected, atol=1e-6)
    flat = predict_probabilities(model.network, images, "unit", None)
    assert not np.allclose(served, flat, atol=1e-3)  # softer than the network's own


def test_an_unregistered_transform_is_one_line_naming_the_registered_ones():
    class Shift(nn.Module):
        def forward(self, logits):
            return logits + 1

    with pytest.raises(UnknownNameError, match="unknown output transform 'Shift'; valid: .*"
                       "temperature"):  # fmt: skip
        TransformedModel(build_model("convnet_1", 10), Shift())


def test_a_fit_of_the_pair_sets_the_networks_dropout():
    """A fit sets its trial's dropout rate on the model it trains: on a pair, the network's,
    which its forward pass reads (not an attribute of the wrapper)."""
    model = _scaled(build_model("convnet_1", 10), 1.0)
    set_dropout(model, 0.5)
    assert model.network.dropout == 0.5 == model.dropout and "dropout" not in vars(model)
