"""Data-efficiency curves: nested subsets, the sizes, Feature Forgetting's plateau schedule, and
P_rep as the mean of a curve."""

import numpy as np
import pandas as pd
import pytest
import torch

from seq2final.core.errors import Seq2FinalError
from seq2final.models import build_model
from seq2final.representations.fit import (
    PlateauSchedule,
    check_sizes,
    doubling_sizes,
    nested_order,
    subset,
)
from seq2final.representations.tables import curve_table, p_rep_table
from seq2final.training import Engine, FitCallback, Task
from seq2final.training.hyperparameters import HyperParameters
from seq2final.training.loop import fit


def test_each_size_contains_every_smaller_one_and_classes_take_turns(learnable):
    labels = np.repeat(np.arange(5), [30, 12, 20, 8, 30])
    order = nested_order(labels, seed=3)
    assert sorted(order.tolist()) == list(range(len(labels)))  # every image, once
    split = learnable(len(labels))
    split.y[:] = torch.as_tensor(labels)
    smaller = set()
    for size in (5, 10, 40, 80, 100):
        chosen = set(order[:size].tolist())
        assert smaller <= chosen and len(chosen) == size
        smaller = chosen
    assert np.bincount(labels[order[:25]], minlength=5).tolist() == [5, 5, 5, 5, 5]
    # class 3 has 8 images: past 40, the others take turns without it, in a new order each round
    counts = np.bincount(labels[order[:50]], minlength=5)
    assert counts[3] == 8 and sorted(counts) == [8, 10, 10, 11, 11]
    assert np.array_equal(order, nested_order(labels, seed=3))  # seeded
    assert not np.array_equal(order, nested_order(labels, seed=4))
    got = subset(split, order, 25)
    assert sorted(got.y.tolist()) == sorted(labels[order[:25]].tolist())


def test_sizes_double_from_fifty_and_a_size_past_the_training_set_is_refused():
    assert doubling_sizes(1600, 50) == [50, 100, 200, 400, 800, 1600]
    assert doubling_sizes(1599, 50) == [50, 100, 200, 400, 800]
    assert doubling_sizes(50, 50) == [50]
    with pytest.raises(
        Seq2FinalError, match="at least 50 training images on the final step; it has 49"
    ):
        doubling_sizes(49, 50)
    assert check_sizes([200, 50, 100], 300) == [50, 100, 200]
    with pytest.raises(Seq2FinalError, match="curve size 400: valid: whole numbers from 1 to 300"):
        check_sizes([50, 400], 300)


class _Rates(FitCallback):
    def __init__(self):
        self.rates = []

    def after_epoch(self, fit):
        self.rates.append(fit.optimizer.param_groups[0]["lr"])


def test_the_plateau_schedule_cuts_the_rate_three_times_then_stops(learnable):
    torch.manual_seed(0)
    # shuffled validation labels: the validation loss stops improving quickly
    task_of = lambda callbacks: Task([learnable(40)], learnable(40, seed=1, shuffled=True),  # noqa: E731
                                     callbacks=callbacks)  # fmt: skip
    rates = _Rates()
    model = build_model("convnet_1", 10)
    engine = Engine(device="cpu", batch_size=20, patience=200)
    result = fit(model, task_of([PlateauSchedule(patience=1), rates]),
                 HyperParameters({"lr": 1e-3}), engine, 200, seed=0)  # fmt: skip
    distinct = sorted(set(rates.rates), reverse=True)
    assert distinct == pytest.approx([1e-3, 3e-4, 9e-5, 2.7e-5, 8.1e-6])  # the 4th cut stops it
    assert rates.rates[-1] == pytest.approx(8.1e-6) and rates.rates.count(rates.rates[-1]) == 1
    assert result.epochs == len(rates.rates) < 200


def test_a_probe_trains_the_head_alone_and_fine_tuning_every_layer(learnable, monkeypatch):
    from seq2final.representations import fit as curves

    tested = []
    real = curves.accuracy
    monkeypatch.setattr(curves, "accuracy", lambda m, *a: tested.append(m) or real(m, *a))
    torch.manual_seed(1)
    model = build_model("convnet_1", 10)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    engine = Engine(device="cpu", batch_size=20, patience=99)
    train, valid, test = learnable(40), learnable(30, seed=1), learnable(30, seed=2)
    lp = curves.curve_point(
        model, "lp", train, valid, test, engine, max_epochs=3, seed=0, patience=9
    )
    ft = curves.curve_point(
        model, "ft", train, valid, test, engine, max_epochs=3, seed=0, patience=9
    )
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # copies fit
    probed, tuned = (m.state_dict() for m in tested)
    body = [k for k in before if not k.startswith("fc.")]
    assert all(torch.equal(probed[k], before[k]) for k in body)  # BN statistics included
    assert not torch.equal(probed["fc.linear.weight"], before["fc.linear.weight"])
    assert not torch.equal(tuned["conv1.conv.weight"], before["conv1.conv.weight"])
    assert (lp.kind, lp.size, ft.kind) == ("lp", 40, "ft")
    assert lp.epochs == ft.epochs == 3  # no plateau in 3 epochs at patience 9
    assert ft.train_flops == 3 * fit_cost_epoch(model, train, valid, engine, None)
    assert lp.train_flops == 3 * fit_cost_epoch(model, train, valid, engine, ["fc"])
    assert ft.train_flops > lp.train_flops > 0
    with pytest.raises(Seq2FinalError, match="curve kind 'xx': valid: ft, lp"):
        curves.curve_point(model, "xx", train, valid, test, engine, max_epochs=3, seed=0)


def fit_cost_epoch(model, train, valid, engine, trainable):
    from seq2final.training.flops import fit_cost

    hp = HyperParameters({"lr": 1e-3, "weight_decay": 0.0, "dropout": 0.0})
    return fit_cost(model, Task([train], valid, trainable=trainable), hp, engine).train_epochs[0]


def test_p_rep_is_the_mean_of_the_curve_per_seed_then_over_seeds():
    points = [
        ("ft", 50, 0.2),
        ("ft", 100, 0.4),
        ("ft", 200, 0.9),
        ("lp", 50, 0.1),
        ("lp", 100, 0.3),
    ]
    rows = [{"budget": "smoke", "view": "", "arch": "convnet_1", "state": "erm", "history": 3,
             "kind": kind, "size": size, "seed": seed, "test_accuracy": accuracy + 0.1 * seed,
             "train_flops": 10 * size}
            for seed in (0, 1) for kind, size, accuracy in points]  # fmt: skip
    table = p_rep_table(pd.DataFrame(rows)).set_index("kind")
    assert table.loc["ft", "p_rep"] == pytest.approx(np.mean([0.5, 0.6]))
    assert table.loc["ft", "std"] == pytest.approx(np.std([0.5, 0.6], ddof=1))
    assert table.loc["ft", "seeds"] == 2 and table.loc["ft", "sizes"] == "50 100 200"
    assert table.loc["ft", "train_flops"] == 3500
    curve = curve_table(pd.DataFrame(rows)).set_index(["kind", "size"])
    assert curve.loc[("lp", 100), "test_accuracy"] == pytest.approx(0.35)
