"""SI, A-GEM and SWA as modes: what their chains hold, end to end on a tiny digits sequence."""

import mlflow
import pytest
import torch
from kedro.framework.session import KedroSession
from torch import nn

from seq2final.core.startup import bootstrap_once
from seq2final.methods import continual
from seq2final.methods.continual import averaged_model, episodic_memory
from seq2final.training import Engine, TensorSplit
from seq2final.training.engine import predict_logits, scale_images

RUN = {
    "sequence": "source100:rotation60:corruption100",  # steps 0..2
    "build_sequences": {"test_size": 50, "oracle_size": 120},
    "budget": "smoke",
    "arch": "convnet_1",
    "mlflow": {"enabled": False},
}


def _run(project, **params):
    while mlflow.active_run():
        mlflow.end_run()
    bootstrap_once(project)
    runtime = {**RUN, **params}
    with KedroSession.create(project_path=project, env="test", runtime_params=runtime) as session:
        session.run(pipeline_names=["build_sequences", "pretrain_historical", "adapt_final"])


def test_si_agem_and_swa_train_their_chains_and_continue_them(project, stores_of, monkeypatch):
    averaged = []
    original = continual.averaged_model
    monkeypatch.setattr(continual, "averaged_model",
                        lambda models, *a: averaged.append(models) or original(models, *a))  # fmt: skip
    # SI's chain with one fixed configuration that learns within a few epochs, so the selected
    # epochs have moved the weights and the importance is not zero
    plain = {"lr": {"grid": [3e-3]}, "dropout": {"grid": [0.0]}}
    fixed = {**plain, "si_c": {"grid": [0.1]}}
    _run(project, method=["si", "agem", "swa"], budget="grid4",
         budgets={"grid4": {"sampler": "grid", "max_epochs": 4}},
         pretrain_historical={"step0": plain},
         historical_modes={"sequential_si": {"space": fixed}, "sequential_agem": {"space": plain},
                           "sequential_ft": {"space": plain}},
         final_modes={"agem": {"space": plain}, "swa": {"space": plain}})  # fmt: skip
    stores = stores_of(project)
    records = {r.method: r for r in (stores.results[k] for k in stores.results)}
    assert set(records) == {"si", "agem", "swa"}

    # SI: its own step-0 fit (Ω needs step 0's path), the anchor at step T−1 under si_c
    si = stores.states[records["si"].historical_state]
    assert [f.stage for f in si.fits] == ["step0", "step1"]
    (chain,) = si.chains.values()
    assert chain.anchor_weight == "si_c" and len(chain.anchors) == 1
    values, importance = chain.anchors[0]
    for name, parameter in chain.last.named_parameters():
        assert torch.equal(values[name], parameter.detach())
    assert any(f.best_epoch > 0 for f in si.fits)  # some selected epoch moved the weights
    assert any(bool((v != 0).any()) for v in importance.values())
    assert "si_c" in records["si"].hyperparameters["final"]  # the final step is pulled too

    # A-GEM and SWA start from the shared step-0 model
    for method in ("agem", "swa"):
        state = stores.states[records[method].historical_state]
        assert [f.stage for f in state.fits] == ["step1"]

    # SWA: the average of the chain's end-of-step models and the final step's, and its record's
    # validation accuracy is the average's (not the fine-tuned model's)
    (models,) = averaged
    assert len(models) == 3
    swa = records["swa"]
    (sequence,) = [stores.sequences[k] for k in stores.sequences]
    valid = TensorSplit.from_arrays(*sequence.step(-1).split("valid"))
    logits = predict_logits(stores.results.model(swa.job_key), valid, swa.engine, None)
    assert swa.valid_accuracy == float((logits.argmax(1) == valid.y).float().mean())


def test_the_episodic_memory_is_a_seeded_reservoir_of_the_earlier_steps_training_images():
    steps = [TensorSplit(torch.full((n, 1, 2, 2), t, dtype=torch.uint8), torch.full((n,), t))
             for t, n in enumerate((30, 20, 40))]  # fmt: skip

    class Sequenced:
        seed = 4

        def split(self, t, split):
            return steps[t]

    everything = episodic_memory(Sequenced(), 2, 1000)
    assert len(everything) == 50 and sorted(everything.y.tolist()) == [0] * 30 + [1] * 20
    some = episodic_memory(Sequenced(), 2, 10)
    assert len(some) == 10 and set(some.y.tolist()) <= {0, 1}  # never a later step's image
    assert torch.equal(episodic_memory(Sequenced(), 2, 10).x, some.x)


def test_the_averaged_model_is_the_mean_of_the_weights_with_batchnorm_statistics_recomputed():
    torch.manual_seed(0)
    models = [nn.Sequential(nn.Conv2d(1, 2, 1), nn.BatchNorm2d(2)) for _ in range(3)]
    data = TensorSplit(torch.randint(0, 256, (6, 1, 2, 2), dtype=torch.uint8), torch.zeros(6))
    engine = Engine(batch_size=6)
    average = averaged_model(models, data, engine)
    weights = torch.stack([m[0].weight for m in models]).mean(0)
    assert torch.allclose(average[0].weight, weights)
    with torch.no_grad():
        features = average[0](scale_images(data.x, engine))
    assert torch.allclose(average[1].running_mean, features.mean((0, 2, 3)), atol=1e-6)
    assert not average.training


def _wild_time_online_swa(start: torch.Tensor, moves: list[torch.Tensor]) -> list[torch.Tensor]:
    """The models Wild-Time's online SWA saves (skzhang1/Wild-Time@23b0696,
    ``wildtime/methods/swa/swa.py``, ``train_online`` and ``save_swa_model``, with torchcontrib's
    ``SWA.update_swa``/``swap_swa_sgd`` re-typed), a timestamp's training being one move of the
    weights: after each timestamp the running buffer takes the weights in (n_avg counting), then
    is swapped into the network, whose ``state_dict()`` backup shares the parameters' storage, so
    reloading it keeps the average: the next timestamp trains from the average, the buffer holds
    the un-averaged weights."""
    weights, buffer, saved = start.clone(), torch.zeros_like(start), []
    for n_avg, move in enumerate(moves):  # n_avg: the buffer's count before this update
        weights = weights + move  # train_step, from the network's weights
        buffer = buffer + (weights - buffer) / (n_avg + 1)  # update_swa
        weights, buffer = buffer.clone(), weights.clone()  # swap_swa_sgd
        saved.append(weights.clone())  # torch.save(state_dict()); load_state_dict(backup): same
    return saved


def test_wild_times_online_swa_trains_on_from_its_average_where_ours_averages_a_plain_chain():
    """docs/fixes.md, Wild-Time: after one timestamp both are the fit's weights; after three,
    Wild-Time's saved model is (2·w₂' + w₃')/3 of weights trained on from averages, ours the
    mean of a chain whose fits continue from un-averaged weights (``averaged_model``): the
    moves 1, 2, 4 give Wild-Time 1, 2, 4 and ours 1, 2, 11/3."""
    start = torch.zeros(1, 3)
    moves = [torch.full((1, 3), 1.0), torch.full((1, 3), 2.0), torch.full((1, 3), 4.0)]
    wild = _wild_time_online_swa(start, moves)
    chain, weights = [], start
    for move in moves:  # ours: each step fine-tuned from the previous step's own weights
        weights = weights + move
        model = nn.Linear(3, 1, bias=False)
        with torch.no_grad():
            model.weight.copy_(weights)
        chain.append(model)
    data = TensorSplit(torch.zeros(2, 1, 1, 3, dtype=torch.uint8), torch.zeros(2))
    ours = [averaged_model(chain[: t + 1], data, Engine(batch_size=2)).weight for t in range(3)]
    assert torch.allclose(wild[0], ours[0]) and torch.allclose(ours[2], torch.full((1, 3), 11 / 3))
    # Wild-Time: w1 = 1 saved; trains on from 1: w2' = 3, saved (1 + 3)/2 = 2; trains on from 2:
    # w3' = 6, its buffer held 3 (swapped out), saved (2·3 + 6)/3 = 4
    assert [float(w[0, 0]) for w in wild] == pytest.approx([1.0, 2.0, 4.0])
    assert float(ours[2][0, 0]) == pytest.approx(11 / 3)  # the mean of 1, 3 and 7


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"sequential_si": {"damping": 0}}, "historical_modes.sequential_si 'damping' = 0"),
        ({"sequential_agem": {"memory": 0}}, "historical_modes.sequential_agem 'memory' = 0"),
    ],
)
def test_a_bad_si_or_agem_block_is_one_line_before_any_work(project, block, message):
    with pytest.raises(Exception, match=message) as raised:
        _run(project, method="si" if "si" in str(block) else "agem", historical_modes=block)
    assert "\n" not in str(raised.value)
    assert not (project / "data/03_primary").exists()


def test_an_si_space_without_its_weight_is_refused():
    from seq2final.core.errors import Seq2FinalError
    from seq2final.methods import HISTORICAL_MODES

    check = HISTORICAL_MODES["sequential_si"].check
    check({"space": {"lr": {"grid": [1e-3]}, "si_c": {"grid": [0.1]}}}, "here")
    with pytest.raises(Seq2FinalError, match="here.space has no 'si_c'"):
        check({"space": {"lr": {"grid": [1e-3]}}}, "here")
