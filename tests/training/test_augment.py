"""``training.augment``: every training image its own draw, keyed, reproducible, off by default."""

import pytest
import torch

from seq2final.core.errors import Seq2FinalError
from seq2final.models import build_model
from seq2final.training import FitCallback, HyperParameters, Task, fit
from seq2final.training.augment import Augmenter, augment_batch, augmentation
from seq2final.training.engine import Engine
from seq2final.training.tensors import TensorSplit


def _data(n=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    return TensorSplit(
        torch.randint(0, 256, (n, 3, 16, 16), dtype=torch.uint8, generator=g), torch.arange(n) % 3
    )


class Seen(FitCallback):
    """Records every training batch the loop hands on."""

    def __init__(self):
        self.batches = []

    def transform_batch(self, fit, domain, batch):
        self.batches.append(batch.x.clone())
        return batch


def _seen(augment, seed=0):
    seen, train = Seen(), _data()
    engine = Engine(batch_size=8, eval_batch_size=24, patience=5, augment=augment)
    task = Task([train], _data(seed=1), callbacks=[seen])
    fit(build_model("convnet_1", 3), task, HyperParameters(lr=1e-3), engine, 2, seed=seed)
    assert len(seen.batches) == 2 * 3  # two epochs of three batches, whatever the validation
    return torch.cat(seen.batches), train.x.to(torch.get_default_dtype()) / 255


@pytest.mark.parametrize("augment", ["flip_crop", "randaugment"])
def test_augment_changes_the_batches_a_fit_sees_and_none_does_not(augment):
    plain, images = _seen("none")
    # every image under `none` is one of the training images, pixel for pixel
    assert all((images == x).flatten(1).all(1).any() for x in plain)
    changed, _ = _seen(augment)
    assert changed.shape == plain.shape
    unseen = sum(not (images == x).flatten(1).all(1).any() for x in changed)
    assert unseen > len(changed) // 4
    again, _ = _seen(augment)
    assert torch.equal(changed, again)  # the fit's seed gives the same draws
    other, _ = _seen(augment, seed=1)
    assert not torch.equal(changed, other)


def test_flip_crop_draws_per_image_and_keeps_the_pixels_it_shows():
    torch.manual_seed(0)
    images = torch.arange(2 * 16 * 16, dtype=torch.uint8).reshape(1, 2, 16, 16).repeat(64, 1, 1, 1)
    out = augment_batch(images, augmentation("flip_crop", (16, 16)))
    assert out.shape == images.shape and out.dtype == torch.uint8
    assert len({bytes(x.numpy()) for x in out}) > 8  # not one draw for the whole batch
    for x in out:  # each is a flip and a shift of the original: its non-zero values are its own
        values = set(x[x > 0].tolist())
        assert values <= set(images[0][images[0] > 0].tolist())


def test_an_augmenter_draws_from_its_own_seeded_stream_whatever_else_draws():
    images = torch.arange(2 * 16 * 16, dtype=torch.uint8).reshape(1, 2, 16, 16).repeat(8, 1, 1, 1)
    first, second = Augmenter("flip_crop", (16, 16), 3), Augmenter("flip_crop", (16, 16), 3)
    torch.manual_seed(0)
    drawn = [first(images) for _ in range(3)]
    for batch in drawn:
        torch.rand(100)  # dropout or another model drawing in between changes nothing
        assert torch.equal(second(images), batch)
    assert not torch.equal(drawn[0], drawn[1])  # the stream moves on from batch to batch
    assert not torch.equal(Augmenter("flip_crop", (16, 16), 4)(images), drawn[0])
    assert Augmenter("none", (16, 16), 3)(images) is images


def test_augment_is_in_the_key_only_when_on_and_fuses_like_any_option():
    assert "augment" not in Engine().results_key()
    assert Engine(augment="flip_crop").results_key()["augment"] == "flip_crop"
    assert Engine(augment="flip_crop", fuse=4).fuse == 4  # a stack augments as a single fit


def test_an_unknown_augment_is_one_line_naming_the_valid_ones(tmp_path):
    from seq2final.config.checks import validate_parameters

    with pytest.raises(Seq2FinalError) as caught:
        validate_parameters({"training": {"augment": "mixup"}})
    message = str(caught.value)
    assert "mixup" in message and "flip_crop" in message and "\n" not in message


def test_none_typed_on_the_command_line_is_none():
    """``--params training.augment=none`` arrives as null (the CLI types ``none`` as null)."""
    from seq2final.cli import parse_params

    training = parse_params("training.augment=none,training.amp=none")["training"]
    assert training == {"augment": None, "amp": None}
    engine = Engine(**training)
    assert (engine.augment, engine.amp) == ("none", "none")
