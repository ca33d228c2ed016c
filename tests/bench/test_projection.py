"""The projection: the protocol's fits counted through the real recipes, and hours from rates."""

import dataclasses
import math

import pytest

from seq2final.bench.projection import FitWork, Rates, count_fits, device_hours, stack_sizes
from seq2final.data.sampler import build_sequence
from seq2final.data.spec import resolve_spec
from seq2final.methods import METHODS
from seq2final.runs.planner import plan_run
from seq2final.training.search import SearchSpace


@pytest.mark.parametrize("arch", ["convnet_1", "resnet_3"])  # a ConvNet and the cheapest ResNet
def test_every_state_and_job_of_the_paper_protocol_is_counted_with_its_grid(
    source, project_parameters, checked_run, arch
):
    params = project_parameters
    spec = resolve_spec("source200:rotation100:corruption100", dataset="digits", test_size=50,
                        oracle_size=100)  # fmt: skip
    sequence = build_sequence(spec, source)
    run = dataclasses.replace(checked_run(budget="paper", training={"device": "cpu"}), spec=spec)
    fits = count_fits(run, sequence, arch)
    plans = [
        plan_run(run.asking(arch, name, None, None), "projection")
        for name, recipe in METHODS.items()
        if recipe.paper_class is not None  # the paper's 18: the protocol projected
    ]
    # every state and job of the paper's methods trains at least one tuned fit, each counted
    # once however many methods share it, and nothing else is counted (no Wild-Time method, no
    # plugin's)
    jobs = {j.key: j for p in plans for j in p.jobs}
    assert {f.owner for f in fits} == {s.key for p in plans for s in p.states} | set(jobs)
    step0 = [f for f in fits if f.stage == "step0"]
    train0 = len(sequence.step(0).split("train")[1])
    assert len(step0) == 1 and step0[0].trials == SearchSpace.parse(
        params["pretrain_historical"]["step0"], "s").grid_size() == 8  # fmt: skip
    assert step0[0].train_images == math.ceil(train0 / 100) * 100 and step0[0].epochs == 100
    grids = {f.trials for f in fits}
    assert {8, 24} <= grids  # plain grids and the side modules' (adjacency × the rest)
    final_train = len(sequence.step(-1).split("train")[1])
    ft = [f for f in fits if f.owner in {key for key, j in jobs.items() if j.method == "ft"}]
    assert [(f.trials, f.train_images) for f in ft] == [(8, math.ceil(final_train / 100) * 100)]


def test_hours_charge_each_trials_epochs_and_an_extra_validation_before_training():
    fits = [FitWork("a", "s", trials=2, epochs=3, train_images=100, valid_images=10)]
    hours = device_hours(fits, Rates(train=10.0, fused_train={2: 20.0}, evaluate=5.0), width=4)
    # training 2·3·100 = 600 images; validation 2·(3+1)·10 = 80 images
    assert hours["sequential"] == pytest.approx((600 / 10 + 80 / 5) / 3600)
    assert hours["fused"] == pytest.approx((600 / 20 + 80 / 5) / 3600)


def test_fused_hours_charge_full_stacks_the_rest_and_single_trials_at_their_own_rates():
    assert stack_sizes(10, 4) == [4, 4, 2] and stack_sizes(8, 4) == [4, 4]
    assert stack_sizes(3, 16) == [3] and stack_sizes(1, 8) == [1]
    fits = [
        FitWork("grid", "s", trials=10, epochs=1, train_images=100, valid_images=0),
        FitWork("one", "s", trials=1, epochs=1, train_images=100, valid_images=0),
    ]
    rates = Rates(train=10.0, fused_train={4: 40.0, 2: 16.0}, evaluate=1.0)
    hours = device_hours(fits, rates, width=4)
    # two stacks of 4 (800 model-images at 40/s), one of 2 (200 at 16/s), one single fit (100 at 10/s)
    assert hours["fused"] * 3600 == pytest.approx(800 / 40 + 200 / 16 + 100 / 10)
    assert hours["sequential"] * 3600 == pytest.approx(1100 / 10)
