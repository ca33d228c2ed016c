"""Interpolation paths, weight projections and SVCCA on small untrained models and made-up data."""

import numpy as np
import pytest
import torch
from result_records import make_record

from seq2final.methods import HistoricalState, ModelChain
from seq2final.models import JointModel, build_model
from seq2final.reporting.interpolation import accuracy, interpolation_path, path_ends
from seq2final.reporting.projection import layer_weights, weight_projection
from seq2final.reporting.svcca import _Reduced, _svcca_at, layer_activations, svcca
from seq2final.training.engine import Engine
from seq2final.training.tensors import TensorSplit

ENGINE = Engine(device="cpu", eval_batch_size=64)


def _model(seed: int, arch: str = "convnet_2"):
    torch.manual_seed(seed)
    return build_model(arch, 10).eval()


@pytest.fixture
def data() -> TensorSplit:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(120, 3, 32, 32), dtype=np.uint8)
    return TensorSplit.from_arrays(x, rng.integers(0, 10, size=120))


def test_a_fine_tuning_path_starts_at_the_historical_model_and_ends_at_the_final(data):
    start, end = _model(0), _model(1)
    state = HistoricalState("erm", "convnet_2", {"main": ModelChain([start])})
    ends = path_ends(make_record(), end, state)
    path = interpolation_path(ends, data, ENGINE, 5)
    assert list(path["s"]) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert path["test_accuracy"].iloc[0] == accuracy(start, data, ENGINE, None)
    assert path["test_accuracy"].iloc[-1] == accuracy(end, data, ENGINE, None)
    assert path_ends(make_record(), end, None) is None  # trained from scratch: no path


def test_sft_paths_start_from_the_chosen_schedule(data):
    chains = {"none": ModelChain([_model(0), _model(1)]), "exp": ModelChain([_model(0), _model(2)])}
    state = HistoricalState("sequential", "convnet_2", chains)
    ends = path_ends(make_record(chosen={"chain": "exp"}), _model(3), state)
    assert ends.start is chains["exp"].last


def test_a_side_tuning_path_scales_the_new_modules_from_step_t_minus_1(data):
    torch.manual_seed(0)
    joint = JointModel("convnet_2", 10, 3, [["layer1"], ["layer2", "fc"]], "side_tune").eval()
    ends = path_ends(make_record(eval_step=2), joint, None)
    path = interpolation_path(ends, data, ENGINE, 3)
    assert path["test_accuracy"].iloc[0] == accuracy(joint, data, ENGINE, 1)
    assert path["test_accuracy"].iloc[-1] == accuracy(joint, data, ENGINE, 2)
    # Exactly step T−1's model at s = 0 (not step 0's), exactly the final model at s = 1.
    with torch.no_grad():
        x = data.x[:8].float() / 255
        assert torch.equal(ends.at(0.0)(x, 2), joint(x, 1))
        assert not torch.equal(joint(x, 1), joint(x, 0))
        assert torch.equal(ends.at(1.0)(x, 2), joint(x, 2))


def test_projection_puts_the_oracle_at_the_origin_and_anchors_on_their_axes():
    oracle, history, final_only, other = (_model(s) for s in range(4))
    frame = weight_projection(
        {"oracle": [oracle], "erm history": [history], "baseline": [final_only], "x": [other]},
        oracle,
        history,
        final_only,
    ).set_index(["label", "layer"])
    for layer in ("conv1", "layer1", "fc", "model"):
        assert frame.loc[("oracle", layer), ["x", "y"]].tolist() == [0.0, 0.0]
        distance_h = np.linalg.norm(layer_weights(history)[layer] - layer_weights(oracle)[layer])
        distance_t = np.linalg.norm(layer_weights(final_only)[layer] - layer_weights(oracle)[layer])
        # Each anchor's coordinate on its own axis is its whole distance from the oracle.
        assert frame.loc[("erm history", layer), "x"] == pytest.approx(distance_h)
        assert frame.loc[("baseline", layer), "y"] == pytest.approx(distance_t)
        assert abs(frame.loc[("x", layer), "x"]) < distance_h


def test_svcca_of_a_layer_with_itself_is_one_and_with_independent_noise_is_low():
    rng = np.random.default_rng(0)
    layer = rng.normal(size=(2000, 32)) @ rng.normal(size=(32, 32))
    for variance in (0.5, 0.9):
        assert svcca(layer, layer, variance) == pytest.approx(1.0)
        assert svcca(layer, rng.normal(size=(2000, 32)), variance) < 0.2
    # Invariant to an invertible linear map of the neurons (what CCA is for), when nothing is cut.
    mixed = layer @ rng.normal(size=(32, 32))
    assert svcca(layer, mixed, 1.0) == pytest.approx(1.0)


def test_svcca_with_fewer_points_than_neurons_equals_the_gram_matrix_route():
    """The whole model's pooled channels outnumber the images: the thin SVD stands in for the
    eigendecomposition of XᵀX and must give the same correlations at every cut-off."""

    def by_gram(x):
        centred = x - x.mean(axis=0)
        energy, vectors = np.linalg.eigh(centred.T @ centred)
        return _Reduced(centred, energy[::-1].clip(min=0.0), vectors[:, ::-1])

    rng = np.random.default_rng(1)
    a = rng.normal(size=(40, 300))
    b = a @ rng.normal(size=(300, 300)) + rng.normal(size=(40, 300))
    cuts = (0.5, 0.9, 0.99)
    assert _Reduced.of(a).vectors.shape == (300, 40)  # the SVD route: n vectors, not d
    assert _svcca_at(_Reduced.of(a), _Reduced.of(b), cuts) == pytest.approx(
        _svcca_at(by_gram(a), by_gram(b), cuts), abs=1e-9
    )


def test_activations_are_per_position_for_convs_and_per_image_for_the_model(data):
    model = _model(0)
    acts = layer_activations(model, TensorSplit(data.x[:4], data.y[:4]), ENGINE, None)
    with torch.no_grad():
        channels, height, width = model.conv1(data.x[:1].float() / 255).shape[1:]
    assert acts["conv1"].shape == (4 * height * width, channels)
    assert acts["fc"].shape == (4, 10)
    assert acts["model"].shape[0] == 4


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_activations_run_on_the_runs_device(data):
    model = _model(0)  # loaded on the CPU, as visualize loads stored models
    on_cpu = layer_activations(model, TensorSplit(data.x[:4], data.y[:4]), ENGINE, None)
    gpu = ENGINE.model_copy(update={"device": "cuda"})
    on_gpu = layer_activations(model, TensorSplit(data.x[:4], data.y[:4]), gpu, None)
    assert next(model.parameters()).is_cuda
    # cuDNN runs fp32 convolutions in TF32 on Ampere and later (torch's default), a 10-bit
    # mantissa: on an H200 the two differ by up to about 1e-4 of values near 1
    assert np.allclose(on_cpu["model"], on_gpu["model"], rtol=1e-3, atol=1e-3)
