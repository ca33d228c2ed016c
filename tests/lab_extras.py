"""A test plugin: one extra method, historical mode, final mode, architecture, shift (with its own
effect) and source, registered when the test session starts (``conftest.py`` loads it through
:func:`seq2final.core.plugins.load_plugins`).

The registry-wide tests loop over the registries, so they cover these without naming them; the
end-to-end runs that train every method train this one too. Its modes need no YAML block (fixed
search spaces), so the project's configuration runs unchanged.
"""

from __future__ import annotations

import numpy as np

from seq2final.data import DefaultSizes, SourceData, check_arrays, effect, shift_block, source
from seq2final.methods import (
    ModelChain,
    continue_chains,
    final_mode,
    historical_mode,
    method,
    stage_name,
)
from seq2final.models import BlockGeometry, BlockModel, ClassifierHead, ConvBN, Stem, architecture
from seq2final.training import SearchSpace, Task, clone_model

FIXED = SearchSpace.parse({"lr": {"grid": [1e-3]}}, "lab_extras")


@historical_mode("extra_last_step", "one model on step T−1 alone", config_keys=())
def last_step_only(ctx, config, step0):
    last = ctx.final_index - 1
    task = Task([ctx.split(last, "train")], ctx.split(last, "valid"))
    model = ctx.tuned_fit("extra", FIXED, lambda: ctx.new_model("extra"), task)
    return {"main": ModelChain([model])}


@final_mode("extra_head", "fit the head alone", continues_from=("model",), config_keys=())
def head_only(ctx, config, state):
    train, valid = ctx.split(-1, "train"), ctx.split(-1, "valid")

    def fit_chain(name, chain):
        task = Task([train], valid, trainable=["fc"])
        start = chain.last
        return ctx.tuned_fit(stage_name(name, "head"), FIXED, lambda: clone_model(start), task)

    return continue_chains(ctx, state, fit_chain, step=None)


method("extra_method", "extra_last_step", "extra_head", "Extra")


@effect("inversion", initial=lambda classes, subpopulations: 0, order=50)
def invert(splits, times, rng, num_classes):
    """Images are negated once per inversion step so far."""
    return [(255 - x, y) for x, y in splits] if times % 2 else splits


@shift_block("invert", effect="inversion")
def one_more_inversion(times, num_classes):
    """Every image is negated."""
    return times + 1


@architecture("extra_convnet_1", family="extra", side_modules=("one_layer", "block"))
def slim_convnet(num_classes, dropout):
    """One conv + BN block of 32 channels after a 64-channel stem."""
    block = [(ConvBN(64, 32, 2), BlockGeometry(64, 32, 2))]
    head = ClassifierHead(32, num_classes)
    return BlockModel("extra_convnet_1", "extra", Stem(), block, head, dropout)


@source("extra_bars", default_sizes=DefaultSizes(80, (40, 80), 40, 100), bundled=True)
def load_bars(data_path, raw_dir):
    """Four classes of noisy bars (one per image quadrant), 32×32, from a fixed seed."""
    rng = np.random.default_rng(0)

    def draw(count):
        labels = np.repeat(np.arange(4), count)
        images = rng.integers(0, 60, size=(len(labels), 32, 32), dtype=np.uint8)
        for index, label in enumerate(labels):
            row, column = divmod(int(label), 2)
            images[index, 16 * row : 16 * row + 16, 16 * column + 6 : 16 * column + 10] = 220
        return check_arrays("extra_bars", images, labels)

    (x_train, y_train), (x_test, y_test) = draw(60), draw(20)
    return SourceData("extra_bars", x_train, y_train, x_test, y_test, ("tl", "tr", "bl", "br"))
