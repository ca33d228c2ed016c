"""Feature Forgetting's gating adapters: what a closed gate blocks, the fold, the phases, the
reset at every step and the refusals."""

import pytest
import torch

from seq2final.core.errors import Seq2FinalError
from seq2final.methods import FINAL_MODES, HISTORICAL_MODES, ModelChain
from seq2final.methods import gates as gates_module
from seq2final.methods.blocks import settings_of
from seq2final.methods.context import Context
from seq2final.methods.gates import GateSettings, GatingAdapters, add_gates, gates_of, remove_gates
from seq2final.models import build_model
from seq2final.models.storage import pack, unpack
from seq2final.training import Engine, FitCallback, Task, clone_model
from seq2final.training.hyperparameters import HyperParameters
from seq2final.training.loop import fit
from seq2final.training.search import Budget
from seq2final.training.tuner import Tuner

ARCHS = ["convnet_2", "resnet_2", "densenet_1"]


def _images(count=6, seed=0):
    return torch.randn(count, 3, 16, 16, generator=torch.Generator().manual_seed(seed))


def _close_every_third(gates):
    with torch.no_grad():
        for gate in gates:
            gate.weight[::3] = -0.5  # ḡ = 1 + 10·(−0.5) = −4, below τ = 0.95


@pytest.mark.parametrize("arch", ARCHS)
def test_a_closed_gate_blocks_its_units_output_and_gradient_and_can_reopen(arch):
    torch.manual_seed(0)
    model = add_gates(build_model(arch, 10), 0.95).train()
    _close_every_third(gates_of(model)[:1])  # the stem's (a DenseNet's later gates see its units)
    with torch.no_grad():  # a DenseNet normalises a closed unit's zeros to its BN shift, whose
        for module in model.modules():  # ReLU passes a gradient only once the shift is positive
            if isinstance(module, torch.nn.BatchNorm2d):
                module.bias.fill_(0.1)
    stem_output = []
    model.conv1.pool.register_forward_hook(lambda m, i, o: stem_output.append(i[0]))
    model(_images()).square().sum().backward()
    closed = stem_output[0][:, ::3]
    assert torch.equal(closed, torch.zeros_like(closed))
    assert stem_output[0][:, 1::3].abs().sum() > 0
    filters = model.conv1.conv.weight.grad
    assert torch.equal(filters[::3], torch.zeros_like(filters[::3]))  # no gradient upstream
    assert filters[1::3].abs().sum() > 0
    stem_gate = gates_of(model)[0].weight.grad
    assert (stem_gate[::3] != 0).all()  # the straight-through estimator still reaches ḡ


@pytest.mark.parametrize("arch", ARCHS)
def test_gates_fold_exactly_into_a_plain_model_and_open_gates_change_nothing(arch):
    torch.manual_seed(1)
    plain = build_model(arch, 10).eval()
    x = _images(seed=1)
    gated = add_gates(clone_model(plain), 0.95).eval()
    assert torch.equal(gated(x), plain(x))  # open gates: the same function
    _close_every_third(gates_of(gated))
    copy = clone_model(gated)  # a copy's hooks use the copy's gates
    assert torch.equal(copy(x), gated(x))
    with torch.no_grad():
        gates_of(copy)[0].weight.fill_(-1.0)
    assert not torch.equal(copy(x), gated(x))
    folded = unpack(pack(remove_gates(clone_model(gated), fold=True)))
    assert torch.equal(folded(x), gated(x))
    opened = remove_gates(clone_model(gated), fold=False)
    assert torch.equal(opened(x), plain(x))
    assert list(opened.state_dict()) == list(plain.state_dict())


class _AfterEpochs(FitCallback):
    def __init__(self):
        self.states = []

    def after_epoch(self, fit):
        self.states.append({k: v.clone() for k, v in fit.model.state_dict().items()})


def test_the_gate_only_phase_leaves_the_networks_bytes_unchanged(learnable):
    torch.manual_seed(2)
    adapters = GatingAdapters(GateSettings(tau=0.95, gate_epochs=1))
    model = adapters.wrap(build_model("convnet_2", 10))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    seen = _AfterEpochs()
    task = Task([learnable(60)], learnable(30, seed=1), callbacks=[adapters.callback(), seen])
    engine = Engine(device="cpu", batch_size=20, patience=99)
    fit(model, task, HyperParameters({"lr": 1e-2}), engine, 2, seed=0)
    after = seen.states[0]  # after the first epoch, whichever epoch the fit selects
    network = [k for k in before if not k.startswith("gates.")]
    assert all(torch.equal(before[k], after[k]) for k in network)  # BN statistics included
    assert any(not torch.equal(before[k], after[k]) for k in before if k.startswith("gates."))
    second = seen.states[1]  # then everything trains
    assert not torch.equal(second["layer1.conv.weight"], before["layer1.conv.weight"])


def test_gates_close_within_the_gate_only_epoch_at_the_default_settings(learnable):
    """ḡ = 1 + s·w with the default s: at a learning rate of the standard grid, a gate-only
    epoch of ten steps reaches τ for some units (ḡ itself would move by 0.01 at most)."""
    torch.manual_seed(3)
    adapters = GatingAdapters()
    model = adapters.wrap(build_model("convnet_2", 10))
    task = Task([learnable(200)], learnable(40, seed=1), callbacks=[adapters.callback()])
    fit(model, task, HyperParameters({"lr": 1e-3}), Engine(device="cpu", batch_size=20), 1, 0)
    closed = [(gate.value() < 0.95).sum().item() for gate in gates_of(model)]
    assert sum(closed) > 0, closed


def test_the_run_checks_refuse_a_gate_phase_that_leaves_the_network_no_epoch():
    wrapped = GatingAdapters(GateSettings(gate_epochs=2))
    model = wrapped.wrap(build_model("densenet_1", 2))  # every zoo architecture can be gated
    wrapped.check(model, max_epochs=3)
    with pytest.raises(Seq2FinalError, match="phase 2 would never run, the phases before it "
                       "taking 2 of the budget's 2 epochs"):  # fmt: skip
        wrapped.check(model, max_epochs=2)
    configured = GatingAdapters().configured({"tau": 0.975, "gate_epochs": 2, "space": {}})
    assert configured.settings == GateSettings(tau=0.975, gate_epochs=2)


class _StepContext(Context):
    """A context whose every step is a small learnable split."""

    def split(self, step, split):
        return self.learnable(40, seed=10 * step + ("train", "valid", "test").index(split))


def _context(tmp_path, learnable):
    budget = Budget(sampler="grid", max_epochs=3)
    ctx = _StepContext(
        sequence=None, arch="convnet_2", seed=0, budget=budget, budget_name="paper",
        engine=Engine(device="cpu", batch_size=20, patience=99),
        tuner=Tuner(budget, None, tmp_path, 0), owner_key="job", seed_key="job",
        device=torch.device("cpu"),
    )  # fmt: skip
    ctx.learnable = learnable
    return ctx


def test_every_step_starts_with_its_gates_reset_to_open(tmp_path, learnable, monkeypatch):
    started, ended = [], []
    real_wrap, real_remove = GatingAdapters.wrap, gates_module.remove_gates

    def wrap(self, model):
        wrapped = real_wrap(self, model)
        started.append([gate.value().detach().clone() for gate in gates_of(wrapped)])
        return wrapped

    def remove(model, fold):
        ended.append([gate.value().detach().clone() for gate in gates_of(model)])
        return real_remove(model, fold)

    monkeypatch.setattr(GatingAdapters, "wrap", wrap)
    monkeypatch.setattr(gates_module, "remove_gates", remove)
    ctx = _context(tmp_path, learnable)
    config = {"tau": 0.95, "gate_epochs": 1, "space": {"lr": {"grid": [3e-2]}}}
    chain = ModelChain([build_model("convnet_2", 10)])
    for t in (1, 2):
        chain = HISTORICAL_MODES["sft_gated"].grow(ctx, config, "main", chain, t)
        assert not gates_of(chain.last)  # the chain keeps the plain network
    assert len(ended) == 2 and started
    assert all(torch.equal(w, torch.ones_like(w)) for weights in started for w in weights)
    assert any((w < 0.95).any() for w in ended[0])  # step 1 closed gates ...
    scales = [m.weight for m in chain.models[1].modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert all((scale != 0).all() for scale in scales)  # ... and kept the units they closed


def test_tau_outside_the_open_interval_and_an_ungateable_architecture_are_refused():
    for where, mode in (("historical_modes.sft_gated", HISTORICAL_MODES["sft_gated"]),
                        ("final_modes.ft_gated", FINAL_MODES["ft_gated"])):  # fmt: skip
        for tau in (0.0, 1.0, 1.5):
            with pytest.raises(Seq2FinalError, match=rf"{where}.*tau"):
                settings_of(mode.settings, {"tau": tau}, where)
        settings_of(mode.settings, {"tau": 0.975, "gate_epochs": 2}, where)
    odd = build_model("convnet_2", 10)
    odd.layer2 = torch.nn.Identity()
    with pytest.raises(Seq2FinalError, match="convnet_2's layer2 is not; valid: the registered"):
        add_gates(odd, 0.95)
    with pytest.raises(Seq2FinalError, match=r"tau 1.0: valid: a number in \(0, 1\)"):
        add_gates(build_model("convnet_1", 10), 1.0)


def test_sft_gated_end_to_end_stores_plain_models_scored_as_gated(project, stores_of, monkeypatch):
    """The chain stores plain networks; the final model is stored with its gates folded, so it
    scores on the final step's validation split what the gated fit validated. Every fit starts
    with half its gates shut far below τ, so the selected model has closed gates whichever
    epoch the fit keeps (smoke's fits on tiny data may keep epoch 0)."""
    import mlflow
    from kedro.framework.session import KedroSession

    from seq2final.core.startup import bootstrap_once
    from seq2final.training import TensorSplit
    from seq2final.training.engine import accuracy

    real_wrap = GatingAdapters.wrap

    def half_shut(self, model):
        wrapped = real_wrap(self, model)
        with torch.no_grad():
            for gate in gates_of(wrapped):
                gate.weight[::2] = -1.0  # ḡ = −9
        return wrapped

    monkeypatch.setattr(GatingAdapters, "wrap", half_shut)
    while mlflow.active_run():
        mlflow.end_run()
    bootstrap_once(project)
    runtime = {
        "sequence": "source100:rotation60:corruption100",
        "budget": "smoke",
        "arch": "convnet_1",
        "method": "sft_gated",
        "mlflow": {"enabled": False},
        "build_sequences": {"test_size": 50, "oracle_size": 120},
    }
    with KedroSession.create(project_path=project, env="test", runtime_params=runtime) as session:
        session.run(pipeline_names=["build_sequences", "pretrain_historical", "adapt_final"])
    stores = stores_of(project)
    (record,) = (stores.results[k] for k in stores.results)
    (sequence,) = (stores.sequences[k] for k in stores.sequences)
    plain = set(build_model("convnet_1", 10).state_dict())
    chain = stores.states[record.historical_state].chains["main"]
    assert len(chain.models) == 2 and all(set(m.state_dict()) == plain for m in chain.models)
    (final_fit,) = [f for f in record.fits if f.stage.endswith("final")]
    assert 0.0 < final_fit.closed_gates < 1.0, final_fit
    model = stores.results.model(record.job_key)
    assert set(model.state_dict()) == plain
    valid = TensorSplit.from_arrays(*sequence.step(-1).split("valid"))
    got = accuracy(model, valid, record.engine)
    assert got == pytest.approx(final_fit.valid_accuracy, abs=1e-6)
