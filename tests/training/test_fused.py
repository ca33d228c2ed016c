"""Fused trials against single fits: same batches, same selection, same numbers to float tolerance."""

import copy
import functools

import optuna
import pytest
import torch

from seq2final.models import JointModel, build_model
from seq2final.training import Engine, HyperParameters, Task, fit
from seq2final.training.fused import FusedTrial, fit_fused
from seq2final.training.terms import Adjacency, Ewc

EPOCHS = 3


pytestmark = pytest.mark.usefixtures("float64")


ENGINE = Engine(device="cpu", batch_size=50, eval_batch_size=60, patience=99)
HPS = [  # different learning rates, L2 weights and (below) seeds per model; dropout 0
    HyperParameters(lr=3e-3, weight_decay=1e-4),
    HyperParameters(lr=1e-3, weight_decay=1e-2),
    HyperParameters(lr=2e-3, weight_decay=0.0),
]
SEEDS = [1, 2, 3]


def single_and_fused(build, task, hps=HPS, seeds=SEEDS, engine=ENGINE, epochs=EPOCHS):
    torch.manual_seed(5)
    init = build()
    singles = []
    for hp, seed in zip(hps, seeds, strict=True):
        model = copy.deepcopy(init)
        singles.append((model, fit(model, task, hp, engine, epochs, seed)))
    models = [copy.deepcopy(init) for _ in hps]
    trials = [FusedTrial(hp, seed) for hp, seed in zip(hps, seeds, strict=True)]
    return singles, list(zip(models, fit_fused(models, task, trials, engine, epochs), strict=True))


def assert_same_fits(singles, fused):
    """Same selected epochs and accuracies, the same curves and weights to float64 tolerance
    (validation runs in float32 as in every fit, hence its looser tolerance); and at least one
    model selected a trained epoch, so the weights compared are not just the initial ones."""
    for (model, result), (fused_model, fused_result) in zip(singles, fused, strict=True):
        assert fused_result.best_epoch == result.best_epoch
        assert fused_result.valid_accuracy == result.valid_accuracy
        for row, fused_row in zip(result.history, fused_result.history, strict=True):
            assert fused_row["valid_accuracy"] == row["valid_accuracy"]
            assert fused_row["valid_loss"] == pytest.approx(row["valid_loss"], rel=1e-5)
            assert fused_row["train_loss"] == pytest.approx(
                row["train_loss"], rel=1e-9, nan_ok=True
            )
        fused_state = fused_model.state_dict()
        for name, value in model.state_dict().items():
            assert torch.allclose(value, fused_state[name], rtol=0, atol=1e-9), name
    assert any(result.best_epoch > 0 for _, result in singles)


@pytest.mark.parametrize(
    ("arch", "trials", "epochs", "images"),
    [("convnet_4", 3, EPOCHS, 60), ("resnet_3", 2, 2, 36), ("densenet_1", 2, 2, 36)],
)
def test_fused_equals_single_fits_at_dropout_zero(arch, trials, epochs, images, learnable):
    """Three trials on the ConvNet; two trials of two epochs on the ResNet and DenseNet, whose
    float64 convolutions are slow on a CPU (two differ in learning rate, L2 weight and seed as
    three do), on fewer images in batches as uneven (a full one and a part)."""
    task = Task([learnable(images)], learnable(images // 2, seed=1))
    build = functools.partial(build_model, arch, 10)
    engine = ENGINE.model_copy(update={"batch_size": images * 5 // 6})
    fits = single_and_fused(build, task, HPS[:trials], SEEDS[:trials], engine, epochs)
    assert_same_fits(*fits)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("arch", ["convnet_4", "resnet_4"])
def test_fused_equals_single_fits_on_the_gpu(arch, learnable):
    """The same comparison on CUDA (float64, where cuDNN's algorithms differ between the
    batched and the single convolutions by float noise only)."""
    task = Task([learnable(80)], learnable(40, seed=1))
    engine = ENGINE.model_copy(update={"device": "cuda"})
    build = lambda: build_model(arch, 10).cuda()  # noqa: E731
    singles, fused = single_and_fused(build, task, engine=engine)
    assert next(fused[0][0].parameters()).is_cuda
    assert_same_fits(singles, fused)


@pytest.mark.parametrize("objective", ["dro", "irm"])
def test_fused_equals_single_fits_for_multi_domain_objectives(objective, learnable):
    task = Task([learnable(100), learnable(60, seed=2)], learnable(60, seed=1), objective=objective)
    penalties = [{"irm_penalty": 2.0}, {"irm_penalty": 0.5}] if objective == "irm" else [{}, {}]
    hps = [HyperParameters(lr=3e-3, **penalties[0]), HyperParameters(lr=1e-3, **penalties[1])]
    build = lambda: build_model("convnet_2", 10)  # noqa: E731
    assert_same_fits(*single_and_fused(build, task, hps=hps, seeds=[4, 5]))


def test_fused_equals_single_fits_with_ewc_anchors(learnable):
    """On ``convnet_1``, whose every parameter has a real gradient. (Where the exact gradient is
    zero, as for a BN bias feeding a conv and another BN in ``convnet_2``, EWC's pull turns
    float noise into steps of ±lr: the first noise-sized Adam step moves the weight off its
    anchor, and from then on Adam's normalised steps chase the anchor in whichever direction
    the noise started, in a single fit as much as in a stack.)"""
    torch.manual_seed(9)
    anchor = build_model("convnet_1", 10)
    values = {n: p.detach().clone() for n, p in anchor.named_parameters()}
    fisher = {n: torch.rand_like(p) for n, p in anchor.named_parameters()}
    task = Task([learnable()], learnable(60, seed=1), penalties=[Ewc([(values, fisher)])])
    hps = [HyperParameters(lr=3e-3, ewc_lambda=10.0), HyperParameters(lr=3e-3, ewc_lambda=0.1)]
    build = lambda: build_model("convnet_1", 10)  # noqa: E731
    assert_same_fits(*single_and_fused(build, task, hps=hps, seeds=[4, 4]))


@pytest.mark.parametrize("mode", ["separate", "side_tune"])
def test_fused_equals_single_fits_for_the_joint_model(mode, learnable):
    """The joint models of the final step: ``separate`` (JM) trains every step's modules with
    the adjacency term; ``side_tune`` trains a side module beside frozen earlier ones. On
    ``convnet_1``, for the reason given in the EWC test (adjacency pulls as EWC does)."""
    task = Task([learnable(100), learnable(100, seed=2)], learnable(60, seed=1), objective="joint",
                steps=[0, 1], valid_step=1, step_weights=[1.0, 3.0],
                penalties=[Adjacency()])  # fmt: skip
    layers = [["conv1", "fc"]]

    def build():
        model = JointModel("convnet_1", 10, 2, layers, mode, "block", "separate")
        if mode == "side_tune":  # as side tuning extends a model: the earlier one frozen
            model.load_previous(build_model("convnet_1", 10), freeze=True)
        return model

    hps = [HyperParameters(lr=3e-3, weight_decay=1e-4, adjacency=1.0),
           HyperParameters(lr=1e-3, adjacency=0.01)]  # fmt: skip
    assert_same_fits(*single_and_fused(build, task, hps=hps, seeds=[6, 7]))


def test_a_stack_augments_its_training_images_as_single_fits_do(learnable):
    """Augmentation is part of the batch both fits build (``loop.training_images``), each model
    drawing from its own augmenter: with ``flip_crop`` a stack computes what its single fits
    compute, and not what they compute without augmentation."""
    task = Task([learnable(60)], learnable(30, seed=1))
    engine = ENGINE.model_copy(update={"augment": "flip_crop"})
    build = functools.partial(build_model, "convnet_4", 10)
    singles, fused = single_and_fused(build, task, HPS[:2], SEEDS[:2], engine, epochs=2)
    assert_same_fits(singles, fused)
    torch.manual_seed(5)  # the initial model single_and_fused starts from
    plain = fit(build(), task, HPS[0], ENGINE, 1, SEEDS[0])
    assert plain.history[1]["train_loss"] != singles[0][1].history[1]["train_loss"]


def test_per_model_dropout_rates_give_per_model_drop_fractions():
    from seq2final.models.architectures import apply_dropout

    rates = torch.tensor([0.0, 0.25, 0.5])
    x = torch.ones(3, 20000)
    out = torch.vmap(lambda row, rate: apply_dropout(row, rate, True), randomness="different")(
        x, rates
    )
    dropped = (out == 0).float().mean(1)
    assert dropped[0] == 0 and abs(dropped[1] - 0.25) < 0.02 and abs(dropped[2] - 0.5) < 0.02
    assert torch.allclose(out[1][out[1] != 0], torch.tensor(1 / 0.75))  # kept values rescaled


def test_a_model_that_stops_or_is_pruned_leaves_the_stack_while_the_others_train_on(learnable):
    task = Task([learnable()], learnable(60, seed=1, shuffled=True))
    torch.manual_seed(5)
    init = build_model("convnet_1", 10)
    models = [copy.deepcopy(init) for _ in range(3)]
    seen = {0: [], 1: [], 2: []}

    def watch(k, prune_at=None):
        def on_epoch(epoch, accuracy):
            seen[k].append(epoch)
            if epoch == prune_at:
                raise optuna.TrialPruned()

        return on_epoch

    trials = [
        FusedTrial(HyperParameters(lr=1e-3), 1, watch(0)),
        FusedTrial(HyperParameters(lr=1e-3), 2, watch(1, prune_at=1)),
        FusedTrial(HyperParameters(lr=1e-3), 3, watch(2)),
    ]
    results = fit_fused(models, task, trials, ENGINE.model_copy(update={"patience": 1}), 6)
    assert results[1] is None and seen[1] == [0, 1]  # pruned after epoch 1, never seen again
    for k in (0, 2):  # patience 1: each stops after its first epoch without improvement
        history = [row["valid_accuracy"] for row in results[k].history]
        stop = next(e for e in range(1, len(history)) if history[e] <= history[e - 1])
        assert results[k].epochs == stop == seen[k][-1]
    # a stopped model's weights and BN statistics are those of its selected epoch, untouched
    single = copy.deepcopy(init)
    expected = fit(single, task, HyperParameters(lr=1e-3), ENGINE.model_copy(update={"patience": 1}),
                   6, 1)  # fmt: skip
    assert (expected.best_epoch, expected.epochs) == (results[0].best_epoch, results[0].epochs)
    assert [r["valid_loss"] for r in expected.history] == pytest.approx(
        [r["valid_loss"] for r in results[0].history], rel=1e-5
    )  # fmt: skip
    for name, value in single.state_dict().items():
        assert torch.allclose(value, models[0].state_dict()[name], rtol=0, atol=1e-9), name
