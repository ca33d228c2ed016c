"""Stored curve points read back per sequence: histories of points stored before they were
recorded, and one P_rep per history."""

import dataclasses

import pandas as pd
import pytest

from seq2final.data.spec import resolve_spec
from seq2final.representations.tables import curve_table, p_rep_table, sequence_curves


def _point(spec, view, state, accuracy, **extra):
    return pd.DataFrame([{
        "sequence": spec.name, "dataset": spec.dataset, "sequence_key": spec.key, "view": view,
        "arch": "convnet_1", "seed": spec.seed, "budget": "smoke", "state": state, "kind": "ft",
        "size": 10, "test_accuracy": accuracy, "train_flops": 1, **extra,
    }])  # fmt: skip


def test_points_without_a_history_get_the_steps_their_state_saw():
    spec = dataclasses.replace(resolve_spec("source100:rotation60:rotation60:corruption100"),
                               seed=3)  # fmt: skip
    stored = {  # three written before histories were recorded (a view's own final step)
        "a": _point(spec, None, "erm", 0.5),
        "b": _point(spec, "0-2", "erm", 0.4),
        "c": _point(spec, "mixed-0-1", "scratch", 0.2),
        "d": _point(spec, None, "erm", 0.3, history=1),
    }
    points = sequence_curves(spec, stored)
    assert points["history"].tolist() == [3, 2, 0, 1]
    assert points["history"].dtype == "int64"
    table = p_rep_table(points)
    whole = table[(table["view"] == "") & (table["state"] == "erm")].set_index("history")
    assert whole["p_rep"].to_dict() == pytest.approx({3: 0.5, 1: 0.3})  # one P_rep a history


def test_a_curve_is_tabulated_in_order_of_size_whatever_the_store_order():
    spec = resolve_spec("source100:rotation60:corruption100")
    # a store lists its points by key, where "ft.100" comes before "ft.50"
    stored = {f"k{i}": _point(spec, None, "erm", size / 1000, history=2).assign(size=size)
              for i, size in enumerate([100, 400, 50, 200])}  # fmt: skip
    table = curve_table(sequence_curves(spec, stored))
    assert table["size"].tolist() == [50, 100, 200, 400]
    assert table["test_accuracy"].tolist() == pytest.approx([0.05, 0.1, 0.2, 0.4])
