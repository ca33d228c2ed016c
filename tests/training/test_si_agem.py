"""SI's path integral and importance, A-GEM's memory and projection, against their definitions."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from seq2final.methods.continual import reservoir_indices, si_importance
from seq2final.training import loop as training
from seq2final.training.engine import Engine, scale_images, unfusable
from seq2final.training.hyperparameters import HyperParameters
from seq2final.training.loop import fit
from seq2final.training.mixing import BatchMixing
from seq2final.training.objectives import Task
from seq2final.training.si_agem import (
    EpisodicMemory,
    GradientProjection,
    PathIntegral,
    PathTracking,
    project_conflicting,
)
from seq2final.training.tensors import TensorSplit

pytestmark = pytest.mark.usefixtures("float64")
ENGINE = Engine(batch_size=64, eval_batch_size=64)


def _data(n=20, seed=0):
    g = torch.Generator().manual_seed(seed)
    return TensorSplit(
        torch.randint(0, 256, (n, 1, 3, 3), dtype=torch.uint8, generator=g), torch.arange(n) % 3
    )


def _toy(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(9, 3))


def test_si_importance_is_the_previous_plus_the_path_over_the_squared_change_plus_damping():
    omega = {"w": torch.tensor([0.2, -0.1, 0.0])}
    start, end = {"w": torch.tensor([1.0, 1.0, 1.0])}, {"w": torch.tensor([1.5, 0.0, 1.0])}
    previous = {"w": torch.tensor([1.0, 2.0, 3.0])}
    got = si_importance(omega, start, end, 0.001, previous)["w"]
    expected = torch.tensor([1.0 + 0.2 / (0.25 + 0.001), 2.0 - 0.1 / (1.0 + 0.001), 3.0])
    assert torch.allclose(got, expected)
    assert torch.allclose(si_importance(omega, start, end, 0.001)["w"], expected - previous["w"])


def test_the_path_integral_sums_minus_gradient_times_step_over_every_step():
    model = _toy()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    path = PathIntegral(list(model.named_parameters()))
    data = _data()
    x, y = scale_images(data.x, ENGINE), data.y
    by_hand = {name: torch.zeros_like(p) for name, p in model.named_parameters()}
    for _ in range(5):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters()}
        before = {name: p.detach().clone() for name, p in model.named_parameters()}
        path.before_update()
        optimizer.step()
        path.after_update()
        for name, p in model.named_parameters():
            by_hand[name] -= grads[name] * (p.detach() - before[name])
    for name, value in path.snapshot().items():
        assert torch.allclose(value.double(), by_hand[name], atol=1e-7), name
    assert sum(v.sum() for v in by_hand.values()) > 0  # descending the loss: a positive path


def test_a_step_a_gradient_scaler_skipped_adds_nothing_to_the_path():
    """Under fp16 a scaler skips the step of an inf gradient: the parameters do not move, and
    inf·0 must not turn ω into NaN for the rest of the sequence."""
    model = _toy()
    path = PathIntegral(list(model.named_parameters()))
    for p in model.parameters():
        p.grad = torch.full_like(p, float("inf"))
    path.before_update()  # the skipped step: no update
    path.after_update()
    assert all(torch.equal(v, torch.zeros_like(v)) for v in path.snapshot().values())


def test_a_fit_returns_the_path_integral_up_to_its_selected_epoch(monkeypatch):
    """Full-batch steps (the loss is the same in any order), replayed by hand with Adam."""
    curve = iter([0.1, 0.5, 0.7, 0.6, 0.6])  # epoch 2 is selected
    monkeypatch.setattr(training, "_validate", lambda *args: (0.0, next(curve)))
    data = _data()
    model, replay = _toy(), _toy()
    task = Task([data], data, callbacks=[PathTracking()])
    result = fit(model, task, HyperParameters(lr=0.05), ENGINE, 4, seed=0)
    assert result.best_epoch == 2 and result.epochs == 4
    optimizer = torch.optim.Adam(replay.parameters(), lr=0.05)
    x, y = scale_images(data.x, ENGINE), data.y
    by_hand = {name: torch.zeros_like(p) for name, p in replay.named_parameters()}
    for _ in range(2):
        optimizer.zero_grad()
        F.cross_entropy(replay(x), y).backward()
        before = {name: p.detach().clone() for name, p in replay.named_parameters()}
        grads = {name: p.grad.clone() for name, p in replay.named_parameters()}
        optimizer.step()
        for name, p in replay.named_parameters():
            by_hand[name] -= grads[name] * (p.detach() - before[name])
    for name, value in result.extras["path_integral"].items():
        assert torch.allclose(value.double(), by_hand[name], atol=1e-6), name
    # and the selected weights are the replay's after those two steps
    for (name, p), (_, q) in zip(model.named_parameters(), replay.named_parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-10), name
    monkeypatch.undo()
    plain = fit(_toy(), Task([data], data), HyperParameters(lr=0.05), ENGINE, 0, seed=0)
    assert plain.extras == {}  # tracked only when asked


def test_the_reservoir_keeps_everything_until_full_then_each_item_with_equal_chance():
    assert reservoir_indices([2, 3], 10, seed=0) == [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]
    kept = reservoir_indices([10, 20], 5, seed=1)
    assert len(kept) == len(set(kept)) == 5
    assert reservoir_indices([10, 20], 5, seed=1) == kept  # seeded
    counts = torch.zeros(30)
    runs = 3000
    for seed in range(runs):
        for step, index in reservoir_indices([10, 20], 5, seed):
            counts[step * 10 + index] += 1
    # every item of the stream with probability 5/30, the first step's and the last alike
    assert torch.allclose(counts / runs, torch.full((30,), 5 / 30), atol=0.03)


def _loss_and_grad(model, x, y):
    loss = F.cross_entropy(model(x), y)
    return loss.item(), [g.clone() for g in torch.autograd.grad(loss, list(model.parameters()))]


def test_a_step_along_the_projected_gradient_never_increases_the_memory_loss():
    """On random toy problems: wherever the current step's gradient would increase the memory's
    loss, the projected one does not (beyond second order in the step size)."""

    def memory_loss_after_step(seed, direction, x, y, size=1e-4):
        moved = _toy(seed)
        with torch.no_grad():
            for p, d in zip(moved.parameters(), direction, strict=True):
                p.sub_(size * d)
        return F.cross_entropy(moved(x), y).item()

    conflicts = 0
    for seed in range(40):
        model = _toy(seed)
        current, memory = _data(12, seed=2 * seed), _data(12, seed=2 * seed + 1)
        if seed % 2:  # half the problems: the current step's images, all one class in each
            current, memory = (
                TensorSplit(current.x, current.y * 0),
                TensorSplit(current.x, current.y * 0 + 1),
            )
        xc, xm = scale_images(current.x, ENGINE), scale_images(memory.x, ENGINE)
        _, g = _loss_and_grad(model, xc, current.y)
        before, r = _loss_and_grad(model, xm, memory.y)
        raw = [gi.clone() for gi in g]
        project_conflicting(g, r)
        assert sum((gi * ri).sum() for gi, ri in zip(g, r, strict=True)) >= -1e-12
        raw_increase = memory_loss_after_step(seed, raw, xm, memory.y) - before
        increase = memory_loss_after_step(seed, g, xm, memory.y) - before
        if sum((gi * ri).sum() for gi, ri in zip(raw, r, strict=True)) < 0:
            conflicts += 1
            assert raw_increase > 0  # the step it replaces would have increased it ...
            assert increase <= 1e-2 * raw_increase, seed  # ... and it does not (to 2nd order)
        else:
            assert [gi.tolist() for gi in g] == [gi.tolist() for gi in raw]  # left as it was
    assert conflicts >= 5  # the toy problems do conflict, so the projection is exercised


def test_the_loop_projects_against_the_whole_memory_when_the_reference_batch_covers_it():
    model = _toy(3)
    memory = _data(10, seed=5)
    memory.y = (memory.y + 1) % 3
    current = _data(10, seed=6)
    xc, xm = scale_images(current.x, ENGINE), scale_images(memory.x, ENGINE)
    for p, g in zip(model.parameters(), _loss_and_grad(model, xc, current.y)[1], strict=True):
        p.grad = g
    raw = [p.grad.clone() for p in model.parameters()]
    _, r = _loss_and_grad(model, xm, memory.y)
    episodic = EpisodicMemory(memory, 64, ENGINE, torch.Generator().manual_seed(0))
    episodic.project(model, list(model.parameters()), lambda loss: loss)
    dot = sum((g * ri).sum() for g, ri in zip(raw, r, strict=True))
    norm = sum(ri.pow(2).sum() for ri in r)
    expected = [g - min(float(dot), 0.0) / float(norm) * ri for g, ri in zip(raw, r, strict=True)]
    for p, e in zip(model.parameters(), expected, strict=True):
        assert torch.allclose(p.grad, e, atol=1e-12)


def test_si_agem_mixing_and_coral_fits_train_their_trials_one_at_a_time():
    data = _data()
    engine = Engine()
    assert unfusable(engine, Task([data], data)) == []
    assert unfusable(engine, Task([data, data], data, objective="irm")) == []
    assert unfusable(engine, Task([data], data, callbacks=[PathTracking()])) == ["PathTracking"]
    projection = Task([data], data, callbacks=[GradientProjection(data, 4)])
    assert unfusable(engine, projection) == ["GradientProjection"]
    mixing = Task([data], data, callbacks=[BatchMixing("mixup", 2.0)])
    assert unfusable(engine, mixing) == ["BatchMixing"]
    assert unfusable(engine, Task([data, data], data, objective="coral")) == ["coral"]


def _wild_time_agem(model, batches, memory, lr):
    """Wild-Time's A-GEM ``train_step`` re-typed (skzhang1/Wild-Time@23b0696,
    ``wildtime/methods/agem/agem.py``), with SGD for its optimiser: ``loss.backward()`` with no
    ``zero_grad`` before it; with a memory, the memory's gradient after ``network.zero_grad()``,
    the projected (or the unprojected) gradient written back into ``.grad``; then the step. No
    memory: its first timestamp, an empty buffer. Returns the gradient each step descended."""
    descended = []
    for x, y in batches:
        F.cross_entropy(model(x), y).backward()
        if memory is not None:
            g = [p.grad.clone() for p in model.parameters()]
            model.zero_grad()
            F.cross_entropy(model(memory[0]), memory[1]).backward()
            r = [p.grad.clone() for p in model.parameters()]
            dot = sum((a * b).sum() for a, b in zip(g, r, strict=True))
            if dot < 0:
                norm = sum((b * b).sum() for b in r)
                g = [a - dot / norm * b for a, b in zip(g, r, strict=True)]
            for p, a in zip(model.parameters(), g, strict=True):
                p.grad.copy_(a)
        descended.append([p.grad.clone() for p in model.parameters()])
        with torch.no_grad():
            for p in model.parameters():
                p.sub_(lr * p.grad)
    return descended


def _ours(model, batches, memory, lr):
    """seq2final's A-GEM update as the loop makes it: gradients zeroed before every backward
    pass, the projection (``project_conflicting``) applied to the step's own gradient."""
    descended = []
    for x, y in batches:
        g = list(torch.autograd.grad(F.cross_entropy(model(x), y), list(model.parameters())))
        if memory is not None:
            loss = F.cross_entropy(model(memory[0]), memory[1])
            project_conflicting(g, list(torch.autograd.grad(loss, list(model.parameters()))))
        descended.append([gi.clone() for gi in g])
        with torch.no_grad():
            for p, gi in zip(model.parameters(), g, strict=True):
                p.sub_(lr * gi)
    return descended


def test_wild_times_agem_descends_gradients_it_never_zeroes_where_ours_zeroes_every_update():
    """docs/fixes.md, Wild-Time: its step k of an empty buffer descends g_1 + ... + g_k, and with
    a memory each step's gradient carries the previous step's projected one; seq2final zeroes the
    gradients every update (A-GEM's definition: each step's own gradient, projected)."""
    batches = [(scale_images(d.x, ENGINE), d.y) for d in (_data(8, s) for s in (1, 2, 3))]
    data = _data(12, seed=9)
    memory = (scale_images(data.x, ENGINE), (data.y + 1) % 3)
    # an empty buffer (Wild-Time's first timestamp): the k-th step descends the running sum
    wild_model = _toy()
    wild, ours = _wild_time_agem(wild_model, batches, None, 0.5), _ours(_toy(), batches, None, 0.5)
    assert all(torch.allclose(a, b) for a, b in zip(wild[0], ours[0], strict=True))
    model = _toy()
    running = [torch.zeros_like(p) for p in model.parameters()]
    for x, y in batches:  # SGD on the running sum of the steps' own gradients
        own = torch.autograd.grad(F.cross_entropy(model(x), y), list(model.parameters()))
        running = [s + g for s, g in zip(running, own, strict=True)]
        with torch.no_grad():
            for p, s in zip(model.parameters(), running, strict=True):
                p.sub_(0.5 * s)
    for a, b in zip(wild_model.parameters(), model.parameters(), strict=True):
        assert torch.allclose(a, b, rtol=0, atol=1e-12)  # Wild-Time's path is that one
    assert sum((a - b).abs().sum() for a, b in zip(wild[2], ours[2], strict=True)) > 1e-3
    # with a memory: the first step is A-GEM's in both, the second carries the first's projection
    wild, ours = _wild_time_agem(_toy(), batches, memory, 0.5), _ours(_toy(), batches, memory, 0.5)
    assert all(torch.allclose(a, b) for a, b in zip(wild[0], ours[0], strict=True))
    assert sum((a - b).abs().sum() for a, b in zip(wild[1], ours[1], strict=True)) > 1e-3


def test_wild_times_si_adds_the_last_gradient_times_the_whole_change_where_ours_sums_updates():
    """docs/fixes.md, Wild-Time: its ``train_step`` (skzhang1/Wild-Time@23b0696,
    ``wildtime/methods/si/si.py``, re-typed) keeps θ at the start of the timestamp and, after its
    last update, adds −g_last ⊙ (θ_end − θ_start) to W once; seq2final's path integral adds
    −g_i ⊙ (θ_i − θ_(i−1)) for every update i (Zenke et al.'s definition). One update: equal."""
    data = _data(20, seed=4)
    x, y = scale_images(data.x, ENGINE), data.y

    def both(updates):
        model = _toy()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        path = PathIntegral(list(model.named_parameters()))
        start = {name: p.detach().clone() for name, p in model.named_parameters()}
        for _ in range(updates):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            path.before_update()
            optimizer.step()
            path.after_update()
        wild = {  # p.grad is the last update's gradient, as in Wild-Time's loop
            name: -p.grad * (p.detach() - start[name]) for name, p in model.named_parameters()
        }
        return wild, path.snapshot()

    wild, ours = both(1)
    assert all(torch.allclose(wild[n], ours[n].double(), atol=1e-7) for n in wild)
    wild, ours = both(3)
    total_wild, total_ours = (
        sum(v.sum() for v in wild.values()),
        sum(v.sum() for v in ours.values()),
    )
    assert abs(total_wild - total_ours) > 0.05 * abs(total_ours), (total_wild, total_ours)
