"""NED's heads: nearest class mean and Prototype Tuning's start, on features we choose."""

from collections import OrderedDict

import numpy as np
import pytest
import torch
from torch import nn

from seq2final.core.errors import Seq2FinalError
from seq2final.methods.heads import ABSENT_LOGIT, class_means, features, imprint
from seq2final.training import Engine, TensorSplit, predict_logits


class FeatureModel(nn.Module):
    """A model whose features are its three channel means: whatever the test puts there."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.fc = nn.Sequential(OrderedDict(linear=nn.Linear(3, num_classes)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.mean((2, 3)))


def _split(points: np.ndarray, labels: np.ndarray) -> TensorSplit:
    """Images whose three channel means are ``points`` (uint8 levels, scaled by the engine)."""
    x = np.repeat(np.repeat(points[:, :, None, None], 2, 2), 2, 3).astype(np.uint8)
    return TensorSplit.from_arrays(x, labels.astype(np.int64))


ENGINE = Engine(input_scale="raw")


def test_features_are_what_the_linear_head_sees():
    rng = np.random.RandomState(0)
    points = rng.randint(0, 255, size=(7, 3))
    got = features(FeatureModel(2), _split(points, np.zeros(7)), ENGINE)
    assert torch.equal(got, torch.tensor(points, dtype=torch.float32))


@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_ncm_decides_as_the_nearest_class_mean_by_brute_force(metric):
    rng = np.random.RandomState(1)
    train_points = rng.randint(1, 255, size=(60, 3))
    train_labels = rng.randint(0, 4, size=60)
    model = FeatureModel(4)
    feats = features(model, _split(train_points, train_labels), ENGINE)
    means, present = class_means(feats, torch.tensor(train_labels), 4)
    for c in range(4):
        assert torch.allclose(
            means[c], torch.tensor(train_points[train_labels == c].mean(0)).float()
        )
    imprint(model, means, present, metric)
    test_points = rng.randint(1, 255, size=(200, 3))
    logits = predict_logits(model, _split(test_points, np.zeros(200)), ENGINE)
    f, m = test_points.astype(np.float64), means.double().numpy()
    if metric == "euclidean":
        distance = ((f[:, None, :] - m[None]) ** 2).sum(2)
    else:
        cos = (f @ m.T) / np.linalg.norm(f, axis=1)[:, None] / np.linalg.norm(m, axis=1)[None]
        distance = 1 - cos
    assert np.array_equal(logits.argmax(1).numpy(), distance.argmin(1))


def test_ncm_is_exact_on_separable_features():
    centres = np.array([[20, 20, 20], [200, 20, 20], [20, 200, 20]])
    rng = np.random.RandomState(2)
    labels = np.repeat(np.arange(3), 10)
    points = centres[labels] + rng.randint(-5, 6, size=(30, 3))
    model = FeatureModel(3)
    split = _split(points, labels)
    imprint(model, *class_means(features(model, split, ENGINE), split.y, 3), "euclidean")
    assert torch.equal(predict_logits(model, split, ENGINE).argmax(1), split.y)


def test_the_head_starts_at_the_class_means_and_an_absent_class_is_never_predicted():
    means = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [4.0, 0.0, 0.0]])
    present = torch.tensor([True, False, True])
    model = FeatureModel(3)
    imprint(model, means, present, "euclidean")
    assert torch.equal(model.fc.linear.weight[[0, 2]], means[[0, 2]])
    assert torch.equal(model.fc.linear.bias, torch.tensor([-7.0, ABSENT_LOGIT, -8.0]))
    assert torch.equal(model.fc.linear.weight[1], torch.zeros(3))
    imprint(model, means, present, "cosine")
    assert torch.allclose(model.fc.linear.weight[0].norm(), torch.tensor(1.0))
    assert model.fc.linear.bias[0] == 0 and model.fc.linear.bias[1] == ABSENT_LOGIT


def test_a_model_without_a_linear_head_is_one_line():
    with pytest.raises(Seq2FinalError, match="fc.linear"):
        features(nn.Linear(3, 2), _split(np.ones((2, 3)), np.zeros(2)), ENGINE)


def test_an_unknown_ncm_metric_is_one_line_before_any_work(project_parameters):
    from seq2final.config.checks import check_mode_configs

    p = project_parameters
    final_modes = {**p["final_modes"], "ncm": {"metric": "manhattan"}}
    with pytest.raises(Seq2FinalError, match=r"^final_modes.ncm 'metric' = 'manhattan': Input "
                       r"should be 'euclidean' or 'cosine'$"):  # fmt: skip
        check_mode_configs(p["historical_modes"], final_modes, p["pretrain_historical"]["step0"])


def test_ncm_and_prototype_tuning_end_to_end(project, stores_of, monkeypatch):
    """NCM's model is the ERM state's with its head set from the final step's class means, its
    cost one forward pass per training image; Prototype Tuning then tunes that head alone. Both
    continue one ERM state, whose detection score is computed once for the two."""
    import mlflow
    from kedro.framework.session import KedroSession

    from seq2final.core.startup import bootstrap_once
    from seq2final.runs import detection
    from seq2final.training.flops import image_flops

    scored = []
    real_detection_auroc = detection.detection_auroc

    def counted(*args):
        scored.append(args[0])
        return real_detection_auroc(*args)

    monkeypatch.setattr(detection, "detection_auroc", counted)
    while mlflow.active_run():
        mlflow.end_run()
    bootstrap_once(project)
    runtime = {"sequence": "source100:rotation60:corruption100", "budget": "smoke",
               "arch": "convnet_1", "method": ["ncm", "proto_tune"], "mlflow": {"enabled": False},
               "build_sequences": {"test_size": 50, "oracle_size": 120}}  # fmt: skip
    with KedroSession.create(project_path=project, env="test", runtime_params=runtime) as session:
        session.run(pipeline_names=["build_sequences", "pretrain_historical", "adapt_final"])
    stores = stores_of(project)
    records = {r.method: r for r in (stores.results[k] for k in stores.results)}
    (sequence,) = (stores.sequences[k] for k in stores.sequences)
    train = TensorSplit.from_arrays(*sequence.step(-1).split("train"))
    ncm, proto = records["ncm"], records["proto_tune"]
    assert ncm.historical_state == proto.historical_state
    erm = stores.states[ncm.historical_state].chains["main"].last
    engine = ncm.engine
    # NED's detection score of the final step in the ERM model's features, by hand: history's
    # training images make the class means; its validation images against the final test
    from seq2final.methods.heads import detection_auroc

    def split(step, name):
        return TensorSplit.from_arrays(*sequence.step(step).split(name))

    expected = detection_auroc(
        erm, TensorSplit.concat([split(0, "train"), split(1, "train")]),
        TensorSplit.concat([split(0, "valid"), split(1, "valid")]), split(-1, "test"), engine,
        len(sequence.class_names),
    )  # fmt: skip
    assert ncm.detection_auroc == proto.detection_auroc == pytest.approx(expected, abs=1e-12)
    assert len(scored) == 1
    assert 0.0 <= expected <= 1.0
    imprint(erm, *class_means(features(erm, train, engine), train.y, len(sequence.class_names)),
            "euclidean")  # fmt: skip
    model = stores.results.model(ncm.job_key)
    expected = erm.state_dict()
    assert model.state_dict().keys() == expected.keys()
    for name, ours in model.state_dict().items():
        assert torch.equal(ours, expected[name]), name
    assert ncm.trials == 0 and ncm.epochs == 0
    assert ncm.train_flops == image_flops(model, train, engine, None) * len(train)
    assert [f.stage for f in proto.fits] == ["prototypes", "head"]
    tuned = stores.results.model(proto.job_key)  # only the head moved
    body = {k: v for k, v in tuned.state_dict().items() if not k.startswith("fc.")}
    assert all(torch.equal(v, erm.state_dict()[k]) for k, v in body.items() if "running" not in k)


def test_minimum_distance_detection_is_certain_for_far_images_and_chance_for_identical_ones():
    from seq2final.methods.heads import detection_auroc

    rng = np.random.RandomState(3)
    labels = np.repeat(np.arange(3), 20)
    directions = np.array([[200, 10, 10], [10, 200, 10], [10, 10, 200]])
    seen = _split(directions[labels] + rng.randint(0, 20, size=(60, 3)), labels)
    model = FeatureModel(3)
    # every class mean points along one axis; the shifted images along the diagonal, far in angle
    far = _split(np.full((30, 3), 120) + rng.randint(0, 5, size=(30, 3)), np.zeros(30))
    assert detection_auroc(model, seen, seen, far, ENGINE, 3) == 1.0
    assert detection_auroc(model, seen, seen, seen, ENGINE, 3) == pytest.approx(0.5, abs=1e-12)
