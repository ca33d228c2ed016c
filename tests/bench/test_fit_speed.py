"""The fit section compares like with like: the bare loop does the work our fit does."""

from collections import Counter

import torch

from seq2final.bench import fit_speed
from seq2final.models import build_model
from seq2final.training.engine import Engine


def test_the_bare_loop_runs_the_same_passes_and_steps_as_our_fit(monkeypatch):
    counts: dict[str, Counter] = {}

    def counting(name):
        def build(arch, classes, dropout=0.0):
            model = build_model(arch, classes, dropout)
            seen = counts.setdefault(name, Counter())

            def before(module, args):
                seen["train" if module.training else "eval", len(args[0])] += 1

            model.register_forward_pre_hook(before)
            original = torch.optim.Adam.step

            def step(self, *a, **k):
                seen["optimizer steps"] += 1
                return original(self, *a, **k)

            monkeypatch.setattr(torch.optim.Adam, "step", step)
            return model

        return build

    train, valid = fit_speed.synthetic_split(250, 0), fit_speed.synthetic_split(120, 1)
    engine = Engine(device="cpu", batch_size=100, eval_batch_size=50)
    for name, loop in (("bare", fit_speed.bare_fit), ("ours", fit_speed.our_fit)):
        monkeypatch.setattr(fit_speed, "build_model", counting(name))
        loop("convnet_1", train, valid, engine, 2)
        monkeypatch.undo()
    assert counts["bare"] == counts["ours"]
    # 2 epochs of batches 100, 100, 50; validation in 50s before training and after each epoch
    assert counts["ours"] == Counter({
        ("train", 100): 4, ("train", 50): 2, ("eval", 50): 6, ("eval", 20): 3,
        "optimizer steps": 6,
    })  # fmt: skip
