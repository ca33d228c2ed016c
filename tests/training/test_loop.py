"""The fit loop's rules on scripted validation curves, and each objective against its definition."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from seq2final.core.errors import Seq2FinalError
from seq2final.models import JointModel, build_model
from seq2final.representations.fit import PlateauSchedule
from seq2final.training import loop as training
from seq2final.training import objectives
from seq2final.training.callbacks import FitCallback
from seq2final.training.engine import Engine, scale_images
from seq2final.training.hyperparameters import HyperParameters
from seq2final.training.loop import FitRun, fit
from seq2final.training.objectives import Task, fisher_information
from seq2final.training.tensors import TensorSplit
from seq2final.training.terms import Adjacency, Batch, anchor_penalty, irm_penalty

ENGINE = Engine(batch_size=8, eval_batch_size=16)


def _data(n: int = 24, classes: int = 3, seed: int = 0, size: int = 16) -> TensorSplit:
    g = torch.Generator().manual_seed(seed)
    return TensorSplit(
        torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=g),
        torch.arange(n) % classes,
    )


def _script(monkeypatch, curve):
    """Make validation return ``curve`` epoch by epoch (epoch 0 first)."""
    values = iter(curve)
    monkeypatch.setattr(
        training, "_validate", lambda model, valid, step, engine: (0.0, next(values))
    )


def _fit(model, curve, monkeypatch, max_epochs=30, **task_options):
    _script(monkeypatch, curve)
    task = Task([_data()], _data(seed=1), **task_options)
    return fit(model, task, HyperParameters(lr=1e-3), ENGINE, max_epochs, seed=0)


def test_selects_the_earliest_best_epoch_and_stops_after_patience_stalls(monkeypatch):
    model = build_model("convnet_1", 3)
    curve = [0.5, 0.6, 0.6, 0.55, 0.7, 0.7, 0.65, 0.6, 0.6, 0.55, 0.5, 0.9]
    result = _fit(model, curve, monkeypatch)
    # After the gain at epoch 4, epochs 5..10 do not beat their predecessor: 6 stalls, stop.
    assert result.epochs == 10
    assert result.best_epoch == 4 and result.valid_accuracy == 0.7
    assert [row["valid_accuracy"] for row in result.history] == curve[:11]


def test_stall_count_resets_on_any_gain_over_the_previous_epoch(monkeypatch):
    curve = [0.5, 0.4, 0.4, 0.4, 0.4, 0.45, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.3]
    result = _fit(build_model("convnet_1", 3), curve, monkeypatch)
    assert result.epochs == 11  # the rise at epoch 5 restarted the count
    assert result.best_epoch == 0


def test_epoch_zero_wins_and_the_initial_weights_come_back(monkeypatch):
    model = build_model("convnet_1", 3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = _fit(model, [0.9] + [0.5] * 10, monkeypatch)
    assert result.best_epoch == 0 and result.epochs == 6
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key


def test_max_epochs_bounds_the_fit(monkeypatch):
    result = _fit(
        build_model("convnet_1", 3), [0.1 * i for i in range(10)], monkeypatch, max_epochs=3
    )
    assert result.epochs == 3 and result.best_epoch == 3


def test_training_metrics_come_from_the_training_pass():
    model = build_model("convnet_1", 3)
    result = fit(model, Task([_data()], _data(seed=1)), HyperParameters(lr=1e-3), ENGINE, 2, 0)
    assert math.isnan(result.history[0]["train_loss"])
    for row in result.history[1:]:  # one pass over all 24 training images per epoch
        assert (row["train_accuracy"] * 24) == pytest.approx(round(row["train_accuracy"] * 24))
        assert row["train_loss"] > 0


def test_linear_probe_changes_only_the_head(monkeypatch):
    model = build_model("convnet_2", 3)
    before = {k: v.clone() for k, v in model.named_parameters()}
    _fit(model, [0.1 * i for i in range(5)], monkeypatch, max_epochs=4, trainable=["fc"])
    for name, parameter in model.named_parameters():
        assert torch.equal(parameter, before[name]) != name.startswith("fc."), name
    assert all(p.requires_grad for p in model.parameters())  # flags restored after the fit


def test_irm_penalty_equals_the_hand_computed_gradient_product():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(6, 4, generator=g)
    labels = torch.tensor([0, 1, 2, 3, 1, 2])
    penalty = irm_penalty(logits, labels, torch.Generator().manual_seed(7))
    order = torch.randperm(6, generator=torch.Generator().manual_seed(7))
    z, y = logits[order], labels[order]

    def gradient(rows):  # d/dw mean CE(z*w) at w=1 is mean over samples of (softmax - onehot) * z
        p = F.softmax(z[rows], 1)
        return ((p - F.one_hot(y[rows], 4)) * z[rows]).mean(0)

    expected = (gradient(slice(0, None, 2)) * gradient(slice(1, None, 2))).sum()
    assert torch.allclose(penalty, expected, atol=1e-6)


def test_dro_back_propagates_only_the_worst_domain():
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 3))
    easy, hard = _data(6, size=2), _data(6, seed=4, size=2)
    hard.y = (hard.y + 1) % 3

    def batch(d):
        return Batch(scale_images(d.x, ENGINE), d.y, None, None, 1.0)

    losses = [float(F.cross_entropy(model(batch(d).x), d.y)) for d in (easy, hard)]
    worst = (easy, hard)[losses.index(max(losses))]
    task = Task([easy, hard], easy, objective="dro")
    loss, *_ = objectives.objective_loss(
        model, [batch(easy), batch(hard)], task, task.checked_hyperparameters({"lr": 1.0}), None
    )
    loss.backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    F.cross_entropy(model(batch(worst).x), worst.y).backward()
    for g, p in zip(got, model.parameters(), strict=True):
        assert torch.allclose(g, p.grad)


def test_fisher_is_the_batch_level_empirical_definition():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 3))
    data = _data(5, size=2)
    engine = Engine(batch_size=2)
    fisher = fisher_information(model, data, engine)
    expected = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
    for start in (0, 2, 4):  # batches of 2, 2, 1
        model.zero_grad()
        x = data.x[start : start + 2].float() / 255
        F.cross_entropy(model(x), data.y[start : start + 2], reduction="sum").backward()
        for n, p in model.named_parameters():
            expected[n] += p.grad.pow(2)
    for name, value in expected.items():
        assert torch.allclose(fisher[name], value / 5), name


def test_ewc_pulls_towards_its_anchor():
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 3))
    values = {n: p.detach().clone() + 1.0 for n, p in model.named_parameters()}
    fisher = {n: torch.full_like(p, 2.0) for n, p in model.named_parameters()}
    count = sum(p.numel() for p in model.parameters())
    assert float(anchor_penalty(model, [(values, fisher)])) == pytest.approx(2.0 * count)


def test_a_huge_adjacency_penalty_makes_step_modules_nearly_equal(monkeypatch):
    def train(adjacency):
        torch.manual_seed(0)
        model = JointModel("convnet_1", 3, 3, [["conv1", "layer1", "fc"]] * 2)
        initial = float(model.adjacency_norm())
        _script(monkeypatch, [0.1 * i for i in range(20)])
        task = Task(
            [_data(), _data(seed=2), _data(seed=3)],
            _data(seed=1),
            objective="joint",
            steps=[0, 1, 2],
            valid_step=2,
            penalties=[Adjacency()],
        )
        fit(model, task, HyperParameters(lr=0.02, adjacency=adjacency), ENGINE, 8, seed=0)
        return float(model.adjacency_norm()) / initial

    assert train(1e4) < 0.05
    assert train(0.0) > 0.5


def test_same_seed_same_weights():
    def run():
        torch.manual_seed(0)
        model = build_model("convnet_1", 3, dropout=0.5)
        fit(
            model,
            Task([_data()], _data(seed=1)),
            HyperParameters(lr=1e-3, dropout=0.5),
            ENGINE,
            3,
            5,
        )
        return model.state_dict()

    first, second = run(), run()
    assert all(torch.equal(first[k], second[k]) for k in first)


@pytest.mark.usefixtures("float64")  # inductor sums in other orders: float64 noise only
def test_a_compiled_fit_matches_the_eager_one_and_compiles_once_for_a_whole_study():
    from torch._dynamo.utils import counters

    task = Task([_data()], _data(seed=1))

    def run(engine, hp):
        torch.manual_seed(0)
        model = build_model("convnet_1", 3)
        return fit(model, task, hp, engine, 2, seed=5), model

    eager, eager_model = run(ENGINE, HyperParameters(lr=1e-3, weight_decay=1e-3))
    compiled_engine = ENGINE.model_copy(update={"compile": True})
    compiled, model = run(compiled_engine, HyperParameters(lr=1e-3, weight_decay=1e-3))
    assert compiled.best_epoch == eager.best_epoch
    for got, want in zip(compiled.history[1:], eager.history[1:], strict=True):
        assert got == pytest.approx(want, rel=1e-9)
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, eager_model.state_dict()[name], rtol=1e-9, atol=1e-12)
    assert isinstance(model.dropout, float)  # the tensor rate of the compiled step is undone
    graphs = counters["stats"]["unique_graphs"]
    # Another trial's values (dropout on, other penalties): the same graph, no recompilation.
    run(compiled_engine, HyperParameters(lr=5e-3, weight_decay=0.2, dropout=0.3))
    assert counters["stats"]["unique_graphs"] == graphs


def test_bad_hyper_parameters_name_the_valid_values():
    task = Task([_data()], _data(seed=1), objective="irm")
    with pytest.raises(ValueError, match=r"unknown hyper-parameter\(s\) momentum; valid: dropout, "
                       r"irm_penalty, lr, weight_decay$"):  # fmt: skip
        task.checked_hyperparameters({"lr": 1.0, "momentum": 0.9})
    with pytest.raises(ValueError, match="irm_penalty' = -1.0: Input should be greater than or"):
        task.checked_hyperparameters({"lr": 1.0, "irm_penalty": -1.0})
    assert task.checked_hyperparameters({"lr": 0.5}) == HyperParameters(
        lr=0.5, dropout=0.0, irm_penalty=1.0, weight_decay=0.0
    )  # the defaults the terms declare


def test_raw_input_scale_feeds_0_to_255():
    x = torch.tensor([[[[255]]]], dtype=torch.uint8)
    assert float(scale_images(x, Engine(input_scale="raw"))) == 255.0
    assert float(scale_images(x, Engine())) == 1.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("amp", ["none", "bf16", "fp16"])
def test_cuda_fit_runs_on_the_gpu(amp):
    engine = Engine(batch_size=8, device="cuda", amp=amp, channels_last=True)
    model = (
        build_model("resnet_1", 3).to(engine.torch_device()).to(memory_format=torch.channels_last)
    )
    result = fit(model, Task([_data()], _data(seed=1)), HyperParameters(lr=1e-3), engine, 2, 0)
    assert next(model.parameters()).is_cuda and len(result.history) == 3


def _batches(*datas, steps=None, weights=None):
    steps = steps or [None] * len(datas)
    weights = weights or [1.0] * len(datas)
    return [
        Batch(scale_images(d.x, ENGINE), d.y, None, t, c)
        for d, t, c in zip(datas, steps, weights, strict=True)
    ]


def test_joint_loss_weights_steps_and_divides_by_their_number():
    torch.manual_seed(0)
    model = JointModel("convnet_1", 3, 2, [["fc"]])
    a, b = _data(6, size=16), _data(6, seed=5, size=16)
    task = Task([a, b], a, objective="joint", steps=[0, 1], step_weights=[1.0, 3.0])
    loss, *_ = objectives.objective_loss(
        model,
        _batches(a, b, steps=[0, 1], weights=[1.0, 3.0]),
        task,
        task.checked_hyperparameters({"lr": 1.0}),
        None,
    )
    model.eval()  # no dropout in the model; BN in train mode in both computations
    model.train()
    ce = [F.cross_entropy(model(scale_images(d.x, ENGINE), t), d.y) for d, t in ((a, 0), (b, 1))]
    assert float(loss) == pytest.approx(float((1.0 * ce[0] + 3.0 * ce[1]) / 2), rel=1e-5)


def test_irm_loss_sums_domains_each_with_its_weighted_penalty():
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 3))
    a, b = _data(6, size=2), _data(6, seed=4, size=2)
    task = Task([a, b], a, objective="irm")
    hp = task.checked_hyperparameters({"lr": 1.0, "irm_penalty": 2.5})
    loss, *_ = objectives.objective_loss(
        model, _batches(a, b), task, hp, torch.Generator().manual_seed(1)
    )
    g = torch.Generator().manual_seed(1)
    expected = 0.0
    for d in (a, b):
        logits = model(scale_images(d.x, ENGINE))
        expected += float(F.cross_entropy(logits, d.y) + 2.5 * irm_penalty(logits, d.y, g))
    assert float(loss) == pytest.approx(expected, rel=1e-5)


def test_one_training_pass_and_one_validation_pass_per_epoch(monkeypatch):
    model = build_model("convnet_1", 3)
    calls = {"train": 0, "eval": 0}
    original = model.forward

    def counting(x):
        calls["train" if model.training else "eval"] += len(x)
        return original(x)

    monkeypatch.setattr(model, "forward", counting)
    train, valid = _data(24), _data(10, seed=1)
    fit(model, Task([train], valid), HyperParameters(lr=1e-3), ENGINE, 3, 0)
    assert calls == {"train": 3 * 24, "eval": 4 * 10}  # epochs 1-3 train; epochs 0-3 validate


def test_fp16_is_refused_off_cuda():
    with pytest.raises(ValueError, match="amp 'fp16' needs a CUDA device"):
        Engine(amp="fp16", device="cpu").torch_device()


@pytest.mark.parametrize("through_a_file", [False, True])
def test_a_fit_paused_and_continued_is_the_uninterrupted_fit_bit_for_bit(tmp_path, through_a_file):
    """Dropout draws from the global random state, IRM from the fit's generator, a schedule keeps
    its own state: paused at epoch 2, another fit trained meanwhile, then continued (in memory
    or from its file), the fit computes what it computes uninterrupted, on this machine exactly."""
    hp = HyperParameters(lr=3e-3, weight_decay=1e-3, dropout=0.3)

    def start():
        torch.manual_seed(0)
        task = Task([_data(), _data(seed=2)], _data(seed=1), objective="irm",
                    callbacks=[PlateauSchedule(patience=0)])  # fmt: skip
        return build_model("convnet_1", 3), task

    model, task = start()
    whole = fit(model, task, hp, ENGINE, 6, seed=5)
    paused_model, paused_task = start()
    run = FitRun(paused_model, paused_task, hp, ENGINE, 6, seed=5)
    assert run.run(until=2) is None and run.epoch == 2
    if through_a_file:
        run.save(tmp_path / "paused.pt")
        run = FitRun.load(tmp_path / "paused.pt", start()[1], ENGINE)
    fit(build_model("convnet_1", 3), Task([_data(seed=3)], _data(seed=4)), hp, ENGINE, 2, seed=9)
    seen = []
    result = run.run(on_epoch=lambda epoch, accuracy: seen.append(epoch))
    assert result is not None and seen == list(range(3, result.epochs + 1))
    exactly = [pytest.approx(row, rel=0, abs=0, nan_ok=True) for row in whole.history]
    assert result.history == exactly and result.best_epoch == whole.best_epoch
    for name, value in model.state_dict().items():
        assert torch.equal(value, run.model.state_dict()[name]), name
    assert any(
        row["train_accuracy"] != whole.history[1]["train_accuracy"] for row in whole.history[2:]
    )


def test_only_a_paused_fit_is_saved(tmp_path):
    torch.manual_seed(0)
    run = FitRun(build_model("convnet_1", 3), Task([_data()], _data(seed=1)), HyperParameters(lr=1e-3),
                 ENGINE, 2, seed=0)  # fmt: skip
    assert run.run() is not None
    with pytest.raises(Exception, match="only a paused fit can be saved"):
        run.save(tmp_path / "ended.pt")
    assert not (tmp_path / "ended.pt").exists()


def test_a_paused_fit_of_an_earlier_layout_is_one_line_saying_to_restart(tmp_path):
    """A file written before a fit's epochs were kept in an ``EpochLog`` (no ``layout``) is
    refused when loaded, not run into a missing attribute."""
    torch.manual_seed(0)
    task = Task([_data()], _data(seed=1))
    run = FitRun(build_model("convnet_1", 3), task, HyperParameters(lr=1e-3), ENGINE, 3, seed=0)
    assert run.run(until=1) is None
    del run.layout  # as an earlier release pickled it
    run.save(tmp_path / "paused.pt")
    with pytest.raises(Seq2FinalError, match="paused fit .* earlier release .* delete it"):
        FitRun.load(tmp_path / "paused.pt", task, ENGINE)


def test_a_fit_whose_callback_does_not_pickle_says_so_and_leaves_no_file(tmp_path):
    class Unpicklable(FitCallback):
        def before_fit(self, fit_state):
            self.read = lambda: fit_state.epoch  # a closure: pickle refuses it

    torch.manual_seed(0)
    task = Task([_data()], _data(seed=1), callbacks=[Unpicklable()])
    run = FitRun(build_model("convnet_1", 3), task, HyperParameters(lr=1e-3), ENGINE, 3, seed=0)
    assert run.run(until=1) is None
    with pytest.raises(Seq2FinalError, match="cannot be paused to a file .*another pruner"):
        run.save(tmp_path / "paused.pt")
    assert list(tmp_path.iterdir()) == []
