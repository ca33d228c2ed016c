"""Wild-Time's methods: time windows, CORAL, mixup and LISA against their definitions."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from seq2final.core.errors import Seq2FinalError
from seq2final.methods.wild_time import (
    Windows,
    irm_objective,
    time_windows,
    window_splits,
    windows_of,
)
from seq2final.training.engine import Engine, scale_images
from seq2final.training.mixing import Mixer
from seq2final.training.objectives import Task, objective_loss
from seq2final.training.tensors import TensorSplit
from seq2final.training.terms import Batch, coral_penalty


def test_overlapping_windows_slide_back_one_step_and_are_cut_at_step_zero():
    windows = Windows(count=4, length=3, overlapping=True, scheme="sliding")
    assert time_windows(9, windows) == [(7, 8, 9), (6, 7, 8), (5, 6, 7), (4, 5, 6)]
    assert time_windows(2, windows) == [(0, 1, 2), (0, 1), (0,)]


def test_non_overlapping_windows_slide_back_a_whole_window():
    windows = Windows(count=4, length=3, overlapping=False, scheme="sliding")
    assert time_windows(9, windows) == [(7, 8, 9), (4, 5, 6), (1, 2, 3), (0,)]
    assert time_windows(4, windows) == [(2, 3, 4), (0, 1)]


def test_wild_times_yearbook_setting_is_the_default_and_bad_blocks_are_one_line():
    # Wild-Time's Yearbook L = 5 (its appendix's Table 6, its configs' group_size): nested
    # windows of 6 steps and more, 36 of them at step 40 (35..40 the narrowest, 0..40 the widest)
    assert Windows() == Windows(length=5, scheme="nested", years="named")
    assert time_windows(40, Windows())[0] == (35, 36, 37, 38, 39, 40)
    assert len(time_windows(40, Windows())) == 36 and time_windows(40, Windows())[-1][0] == 0
    assert len(time_windows(40, Windows(scheme="sliding"))) == 10
    with pytest.raises(Seq2FinalError, match=r"final_modes.all_coral_t 'windows.length' = 0"):
        windows_of({"windows": {"length": 0}}, "final_modes.all_coral_t")
    with pytest.raises(Seq2FinalError, match=r"'windows.count' = 0: .*greater than or equal to 1"):
        windows_of({"windows": {"count": 0, "scheme": "sliding"}}, "final_modes.all_coral_t")
    with pytest.raises(
        Seq2FinalError, match=r"'windows.scheme' = 'rolling': .*'nested' or 'sliding'"
    ):
        windows_of({"windows": {"scheme": "rolling"}}, "final_modes.all_coral_t")
    with pytest.raises(
        Seq2FinalError,
        match=r"unknown key 'windows.size'; valid: count, length, overlapping, scheme, years",
    ):
        windows_of({"windows": {"size": 3}}, "final_modes.all_coral_t")
    with pytest.raises(Seq2FinalError, match=r"years 'loaded' reads Wild-Time's nested windows"):
        windows_of({"windows": {"years": "loaded", "scheme": "sliding"}}, "historical_modes.irm_t")


def test_coral_is_the_mean_over_domain_pairs_of_mean_and_covariance_differences():
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(20, 3, generator=g, dtype=torch.float64) + i for i in range(3))

    def distance(x, y):
        cx, cy = torch.cov(x.T), torch.cov(y.T)  # unbiased, as the definition
        return (x.mean(0) - y.mean(0)).pow(2).mean() + (cx - cy).pow(2).mean()

    expected = (distance(a, b) + distance(a, c) + distance(b, c)) / 3
    torch.testing.assert_close(coral_penalty([a, b, c]), expected)
    assert coral_penalty([a, a.clone()]).item() == pytest.approx(0.0)


def _wild_time_coral_loss(logits, y, groups, coral_lambda):
    """Wild-Time's ``DeepCORAL.train_step`` loss re-typed: the criterion (cross-entropy, mean
    reduction) over the whole batch, plus λ times ``coral_penalty`` summed over the pairs of
    groups and divided by their number."""

    def penalty(x, z):
        mean_x, mean_z = x.mean(0, keepdim=True), z.mean(0, keepdim=True)
        cova_x = (x - mean_x).t() @ (x - mean_x) / (len(x) - 1)
        cova_z = (z - mean_z).t() @ (z - mean_z) / (len(z) - 1)
        return (mean_x - mean_z).pow(2).mean() + (cova_x - cova_z).pow(2).mean()

    classification_loss = F.cross_entropy(logits, y)
    indices = [torch.nonzero(groups == g, as_tuple=True)[0] for g in groups.unique()]
    n = len(indices)
    coral_loss = torch.zeros(1, dtype=logits.dtype)
    for i in range(n):
        for j in range(i + 1, n):
            coral_loss += penalty(logits[indices[i]], logits[indices[j]])
    if n > 1:
        coral_loss /= n * (n - 1) / 2
    return classification_loss + coral_lambda * coral_loss


@pytest.mark.usefixtures("float64")
def test_the_coral_objective_is_wild_times_pooled_loss_on_windows_of_unequal_size():
    """Windows of 12, 7 and 5 images in one batch (a partial last batch makes them unequal):
    Wild-Time takes the cross-entropy over the pooled images, so a window counts by its size."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3))
    sizes = (12, 7, 5)
    xs = [torch.randn(n, 3, 2, 2) for n in sizes]
    ys = [torch.randint(0, 3, (n,)) for n in sizes]
    batches = [Batch(x, y, None, None, 1.0) for x, y in zip(xs, ys, strict=True)]
    task = Task([TensorSplit(torch.zeros(1, 3, 2, 2, dtype=torch.uint8), torch.zeros(1).long())],
                TensorSplit(torch.zeros(1, 3, 2, 2, dtype=torch.uint8), torch.zeros(1).long()),
                objective="coral")  # fmt: skip
    hp = task.checked_hyperparameters({"lr": 1e-3, "coral": 0.9})
    loss, *_ = objective_loss(model, batches, task, hp, None)
    groups = torch.cat([torch.full((n,), t) for t, n in enumerate(sizes)])
    expected = _wild_time_coral_loss(model(torch.cat(xs)), torch.cat(ys), groups, 0.9)
    torch.testing.assert_close(loss.reshape(1), expected)
    # the equal-weight mean of the windows' losses, which this fixed, is another number here
    window_mean = sum(F.cross_entropy(model(x), y) for x, y in zip(xs, ys, strict=True)) / 3
    pooled = F.cross_entropy(model(torch.cat(xs)), torch.cat(ys))
    assert (window_mean - pooled).abs().item() > 1e-3


def _domain(images=60, classes=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (images, 3, 4, 4), dtype=torch.uint8, generator=g)
    return TensorSplit(x, torch.randint(0, classes, (images,), generator=g))


def test_lisa_mixes_every_image_only_with_images_of_its_own_label():
    domain, engine = _domain(), Engine()
    mixer = Mixer("lisa", 2.0, domain, engine)
    generator = torch.Generator().manual_seed(1)
    index = torch.arange(20)
    y = domain.y[index]
    partners = mixer.partners(y, generator)
    assert torch.equal(domain.y[partners], y)  # same label, always
    assert len(set(partners.tolist())) > 10  # drawn across the domain, not the batch
    torch.manual_seed(0)
    x = scale_images(domain.x[index], engine)
    mixed, mixed_y, mix = mixer(x, y, torch.Generator().manual_seed(1))
    assert mixed_y is None and mix is None  # the label stays
    torch.manual_seed(0)
    lam = mixer.beta.sample((20,)).view(-1, 1, 1, 1)
    torch.testing.assert_close(
        mixed, lam * x + (1 - lam) * scale_images(domain.x[partners], engine)
    )


def test_mixup_mixes_a_batch_with_its_permutation_and_keeps_both_labels():
    """Wild-Time's ``mixup_data`` re-typed: one λ for the whole batch, ``λ·x + (1−λ)·x[index]``
    with ``index`` a permutation of the batch, and both labels kept."""
    domain, engine = _domain(), Engine()
    mixer = Mixer("mixup", 2.0, domain, engine)
    x, y = scale_images(domain.x[:10], engine), domain.y[:10]
    torch.manual_seed(3)
    mixed, mixed_y, mix = mixer(x, y, torch.Generator().manual_seed(2))
    order = torch.randperm(10, generator=torch.Generator().manual_seed(2))
    assert torch.equal(mixed_y, y[order]) and 0 < float(mix) < 1
    assert mix.dim() == 0  # one λ per batch, not per image
    torch.testing.assert_close(mixed, mix * x + (1 - mix) * x[order])


def test_lambda_follows_beta_2_2():
    mixer = Mixer("lisa", 2.0, _domain(), Engine())
    torch.manual_seed(0)
    draws = mixer.beta.sample((20000,))
    assert float(draws.mean()) == pytest.approx(0.5, abs=0.01)
    assert float(draws.var()) == pytest.approx(1 / 20, abs=0.003)  # Beta(2,2): 1/20


def test_the_mixup_loss_weighs_each_labels_loss_by_its_share_of_the_image():
    """Wild-Time's ``mixup_criterion`` re-typed: ``λ·CE(pred, y_a) + (1−λ)·CE(pred, y_b)``."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3))
    x, y, other = torch.randn(6, 3, 2, 2), torch.arange(6) % 3, (torch.arange(6) + 1) % 3
    mix = torch.tensor(0.3)
    task = Task([TensorSplit(torch.zeros(1, 3, 2, 2, dtype=torch.uint8), torch.zeros(1).long())],
                TensorSplit(torch.zeros(1, 3, 2, 2, dtype=torch.uint8), torch.zeros(1).long()))  # fmt: skip
    batch = Batch(x, y, None, None, 1.0, None, other, mix)
    loss, *_ = objective_loss(
        model, [batch], task, task.checked_hyperparameters({"lr": 1e-3}), None
    )
    logits = model(x)
    expected = 0.3 * F.cross_entropy(logits, y) + 0.7 * F.cross_entropy(logits, other)
    torch.testing.assert_close(loss, expected)


def test_a_bad_windows_or_mix_alpha_block_is_refused_before_any_work(project_parameters):
    from seq2final.config.checks import validate_parameters

    params = dict(project_parameters)
    bad = {**params["final_modes"], "all_coral_t": {**params["final_modes"]["all_coral_t"],
                                                    "windows": {"count": 0}}}  # fmt: skip
    with pytest.raises(Seq2FinalError, match=r"final_modes.all_coral_t 'windows.count' = 0"):
        validate_parameters({**params, "final_modes": bad})
    bad = {**params["historical_modes"], "lisa": {**params["historical_modes"]["lisa"],
                                                  "mix_alpha": -1}}  # fmt: skip
    with pytest.raises(Seq2FinalError, match=r"historical_modes.lisa 'mix_alpha' = -1: Input sh"):
        validate_parameters({**params, "historical_modes": bad})


class _RecordingContext:
    """A context over 6 steps whose training images carry their step's number, and whose
    ``tuned_fit`` keeps the task instead of training."""

    final_index = 5

    def __init__(self) -> None:
        self.tasks: list[Task] = []

    def split(self, step: int, name: str) -> TensorSplit:
        images = 10 * step + torch.arange(step + 2)  # step t: t + 2 images, all told apart
        x = images.to(torch.uint8).view(-1, 1, 1, 1).expand(-1, 3, 2, 2).contiguous()
        return TensorSplit(x, torch.zeros(len(images), dtype=torch.long))

    def history(self, name: str) -> TensorSplit:
        return self.split(0, name)

    def new_model(self, stage: str) -> torch.nn.Module:
        return torch.nn.Linear(1, 1)

    def tuned_fit(self, stage: str, space: object, make_model, task: Task) -> torch.nn.Module:
        self.tasks.append(task)
        return make_model()


@pytest.mark.parametrize("overlapping", [True, False])
def test_each_time_window_domain_holds_exactly_its_steps_training_images(overlapping):
    from seq2final.methods import FINAL_MODES, HISTORICAL_MODES

    config = {"windows": {"count": 3, "length": 2, "overlapping": overlapping, "scheme": "sliding"},
              "space": {"lr": {"grid": [1e-3]}}}  # fmt: skip
    ctx = _RecordingContext()
    HISTORICAL_MODES["coral_t"].train(ctx, config, None)  # steps 0..4: the present is step 4
    FINAL_MODES["all_coral_t"].run(ctx, config, None)  # steps 0..5: the present is step 5
    expected = {
        True: [[(3, 4), (2, 3), (1, 2)], [(4, 5), (3, 4), (2, 3)]],
        False: [[(3, 4), (1, 2), (0,)], [(4, 5), (2, 3), (0, 1)]],
    }[overlapping]
    for task, windows in zip(ctx.tasks, expected, strict=True):
        assert task.objective.name == "coral"
        assert [sorted(d.x[:, 0, 0, 0].tolist()) for d in task.domains] == [
            sorted(10 * t + i for t in window for i in range(t + 2)) for window in windows
        ]


@pytest.mark.parametrize(("present", "length"), [(0, 5), (3, 5), (5, 5), (12, 5), (20, 10), (7, 1)])
def test_nested_windows_are_wild_times_yearbook_groups(present, length):
    """Wild-Time's ``YearbookGroup`` re-typed: at time index ``idx`` a group id g is one of
    ``range(max(1, idx - group_size + 1))`` and its window is ``arange(max(0, idx - g -
    group_size), idx + 1)``."""
    groups = range(max(1, present - length + 1))
    expected = [tuple(np.arange(max(0, present - g - length), present + 1)) for g in groups]
    windows = time_windows(present, Windows(length=length))  # the default scheme
    assert windows == [tuple(int(t) for t in w) for w in expected]
    assert all(w[-1] == present for w in windows)  # every window ends at the present
    assert windows[-1][0] == 0  # and together they reach step 0


def _wild_time_loaded_window(years: list[np.ndarray], present: int, group: int, size: int) -> set:
    """The images Wild-Time's Yearbook loader can read for window ``group`` at time index
    ``present`` (skzhang1/Wild-Time@23b0696, ``wildtime/data/yearbook.py``, re-typed):
    ``update_historical`` stores step t's images before steps t−1..0's, so newest first;
    ``task_idxs`` counts each step's offsets oldest first; ``YearbookGroup.__getitem__`` takes a
    step of ``arange(max(0, idx − g − group_size), idx + 1)``, then an offset in its range."""
    stored = years[0]
    for t in range(1, present + 1):
        stored = np.concatenate([years[t], stored])
    offsets = np.cumsum([0] + [len(y) for y in years])
    window = np.arange(max(0, present - group - size), present + 1)
    return {int(stored[i]) for t in window for i in range(offsets[t], offsets[t + 1])}


@pytest.mark.parametrize("sizes", [[5] * 10, [3, 7, 4, 6, 2, 5, 8, 3, 4, 6]])
def test_loaded_windows_read_what_wild_times_loader_reads_named_ones_the_named_steps(sizes):
    """docs/fixes.md, Wild-Time: ``years: loaded`` gives each window the images Wild-Time's
    loader reads for it; ``named`` (the default) the images of the steps its formula names."""
    years = [100 * t + np.arange(n) for t, n in enumerate(sizes)]
    steps = [
        TensorSplit(torch.zeros(len(y), 1, 1, 1, dtype=torch.uint8), torch.as_tensor(y))
        for y in years
    ]
    present, size = len(sizes) - 1, 3
    loaded = window_splits(steps, Windows(length=size, years="loaded"))
    named = window_splits(steps, Windows(length=size))
    assert len(loaded) == len(named) == present - size + 1
    for g, (ours, theirs) in enumerate(zip(loaded, named, strict=True)):
        assert set(ours.y.tolist()) == _wild_time_loaded_window(years, present, g, size)
        window = range(max(0, present - g - size), present + 1)
        assert set(theirs.y.tolist()) == {int(i) for t in window for i in years[t]}
        assert len(ours) == len(theirs)
    if len(set(sizes)) == 1:  # equal steps: the loader reads the mirror of the named steps
        assert {int(i) // 100 for i in loaded[0].y} == set(range(size + 1))  # never the present


def test_irm_t_trains_with_the_penalty_its_dummy_names():
    assert irm_objective({}, "historical_modes.irm_t") == "irm_v1"  # Wild-Time's, by default
    assert irm_objective({"irm_dummy": "per_class"}, "historical_modes.irm_t") == "irm"
    with pytest.raises(Seq2FinalError) as error:
        irm_objective({"irm_dummy": "vector"}, "historical_modes.irm_t")
    assert str(error.value) == (
        "historical_modes.irm_t 'irm_dummy' = 'vector': Input should be 'scalar' or 'per_class'"
    )


def _wild_time_window_id(index: int, present: int, group_size: int) -> int:
    """The window id Wild-Time's ``YearbookGroup.__getitem__`` gives training image ``index``
    at step ``present`` (skzhang1/Wild-Time@23b0696, ``wildtime/data/yearbook.py``, re-typed;
    overlapping windows): numpy seeded by the index, one of the ids 0 .. present − group_size
    drawn uniformly."""
    np.random.seed(index)
    return int(np.random.choice(list(range(max(1, present - group_size + 1)))))


def test_wild_time_draws_each_images_window_where_every_window_here_is_in_every_batch():
    """docs/fixes.md, Wild-Time: at Yearbook's step 40 with ``group_size`` 5 there are 36
    windows; Wild-Time's batch of 32 holds the windows its images drew (about 21 of them, never
    a fixed ``num_groups``), seq2final's holds all 36 as its domains. Over 1,000 batches of
    shuffled indices, as its loader draws them."""
    ours = time_windows(40, Windows())
    assert len(ours) == 36
    shuffle = np.random.default_rng(0)
    held = [
        len({_wild_time_window_id(int(i), 40, 5) for i in shuffle.choice(5000, 32, replace=False)})
        for _ in range(1000)
    ]
    assert min(held) > 4 and max(held) < len(ours)
    assert 20 < float(np.mean(held)) < 23  # 21.3 measured


def test_at_time_0_wild_times_irm_t_and_group_dro_t_are_not_the_plain_fit():
    """docs/protocols.md, "Eval-Stream, time 0": on step 0 there is one window, and Wild-Time's
    IRM-T loss (skzhang1/Wild-Time@23b0696, ``wildtime/methods/irm/irm.py``, re-typed: the mean
    loss plus IRMv1's penalty, the product of the two half-batches' gradients at the scale 1)
    and its GroupDRO-T loss (the one window's loss times its weight, 1/``num_groups`` moved by
    exp(0.01 · loss) and renormalised over ``num_groups``) are not the cross-entropy the shared
    step-0 fit descends."""
    torch.manual_seed(0)
    logits, y = torch.randn(16, 3, dtype=torch.float64), torch.arange(16) % 3
    plain = F.cross_entropy(logits, y)
    scale = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
    losses = F.cross_entropy(scale * logits, y, reduction="none")
    grads = [
        torch.autograd.grad(half.mean(), [scale], create_graph=True)[0]
        for half in (losses[0::2], losses[1::2])
    ]
    irm_t = losses.mean() + 1.0 * grads[0] * grads[1]  # irm_lambda 1, as Wild-Time's scripts
    assert float((irm_t - plain).detach()) > 1e-3
    weight = 0.25 * torch.exp(0.01 * plain) / (0.25 * torch.exp(0.01 * plain) + 0.75)
    group_dro_t = weight * plain  # windows 1..3 hold no image: their losses are 0
    assert float(weight) < 0.26 and float(group_dro_t) < 0.3 * float(plain)
