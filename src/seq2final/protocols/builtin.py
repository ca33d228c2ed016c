"""The registered protocols: the paper's ``final``, Wild-Time's Eval-Fix and Eval-Stream, NED's
test-then-train and Wild-Time's mixed-split diagnostic.

Scores follow the two papers: Wild-Time's in-distribution accuracy is one accuracy over the pooled
held-out images of the training steps, its out-of-distribution average an unweighted mean over
later steps and its worst their minimum; a stream's average and worst are taken per time over
its window and then averaged over time. NED's stream accuracy is the mean over the stream of
predictions made before training on what is predicted.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from seq2final.protocols.protocol import (
    ProtocolOptions,
    StepAccuracies,
    View,
    long_enough,
    prefix,
    protocol,
    split_step,
    stream_times,
)


def _no_views(num_steps: int, options: ProtocolOptions) -> list[View]:
    return []


@protocol(
    "final",
    "the paper's: adapt to the final step, test on its held-out images (the sequence itself, "
    "no views)",
    _no_views,
    reports=("test_accuracy",),
    temporal=False,
)
def _final(
    accuracies: Mapping[str, StepAccuracies], num_steps: int, options: ProtocolOptions
) -> dict[str, Any]:
    return {}  # the job records' own test accuracy is the score


def later_steps(accuracies: StepAccuracies, after: int, until: int) -> dict[int, float]:
    """Test accuracy on each step after ``after`` up to ``until`` (inclusive)."""
    return {step: accuracies[step].test for step in range(after + 1, until + 1)}


def pooled_accuracy(accuracies: StepAccuracies, steps: range) -> float:
    """One accuracy over the pooled test images of ``steps`` (each step weighted by its size)."""
    sizes = [accuracies[s].test_size for s in steps]
    return sum(accuracies[s].test * n for s, n in zip(steps, sizes, strict=True)) / sum(sizes)


def _fix_views(num_steps: int, options: ProtocolOptions) -> list[View]:
    return [prefix(split_step(num_steps, options))]


@protocol(
    "eval_fix",
    "Wild-Time's Eval-Fix: train on steps 0..split_step, test on every later step",
    _fix_views,
    reports=("id_accuracy", "ood_average", "ood_worst"),
    headline="ood_average",
)
def _eval_fix(
    accuracies: Mapping[str, StepAccuracies], num_steps: int, options: ProtocolOptions
) -> dict[str, Any]:
    split = split_step(num_steps, options)
    steps = accuracies[prefix(split).name]
    return {
        "id_accuracy": pooled_accuracy(steps, range(split + 1)),
        **out_of_distribution(steps, split, num_steps),
    }


def out_of_distribution(steps: StepAccuracies, split: int, num_steps: int) -> dict[str, Any]:
    """Wild-Time's OOD numbers of a model trained on steps 0..split: the unweighted mean and the
    minimum of its test accuracy over every later step, and each step's."""
    ood = later_steps(steps, split, num_steps - 1)
    return {
        "split_step": split,
        "ood_average": statistics.mean(ood.values()),
        "ood_worst": min(ood.values()),
        "ood_per_step": ood,
    }


def _stream_views(num_steps: int, options: ProtocolOptions) -> list[View]:
    return [prefix(t) for t in stream_times(num_steps, options)]


@protocol(
    "eval_stream",
    "Wild-Time's Eval-Stream: the model of each time t tested on steps t+1..t+window",
    _stream_views,
    reports=("average", "worst", "p_cl", "p_forget"),
)
def _eval_stream(
    accuracies: Mapping[str, StepAccuracies], num_steps: int, options: ProtocolOptions
) -> dict[str, Any]:
    assert options.window is not None, "options_for resolves the window first"
    per_time: list[dict[str, Any]] = []
    times = stream_times(num_steps, options)
    for t in times:
        window = later_steps(accuracies[prefix(t).name], t, t + options.window)
        per_time.append({"time": t, "average": statistics.mean(window.values()),
                         "worst": min(window.values()), "per_step": window,
                         **continual_scores(accuracies, times, t)})  # fmt: skip
    return {
        "window": options.window,
        "average": statistics.mean(float(row["average"]) for row in per_time),
        "worst": statistics.mean(float(row["worst"]) for row in per_time),
        "p_cl": per_time[-1]["p_cl"],
        "p_forget": per_time[-1]["p_forget"],
        "per_time": per_time,
    }


def continual_scores(
    accuracies: Mapping[str, StepAccuracies], times: Sequence[int], t: int
) -> dict[str, float | None]:
    """Feature Forgetting's P_CL and P_forget of the model of time ``t`` (docs/representations.md):
    its mean test accuracy over the steps seen so far (0..t), and its Eq. 8, the mean over the
    same steps of the best accuracy any time's model up to ``t`` (``t``'s own included) had on
    the step minus this one's: never negative, 0 at the first time."""
    now = accuracies[prefix(t).name]
    seen = [now[j].test for j in range(t + 1)]
    models = [accuracies[prefix(u).name] for u in times if u <= t]
    drops = [max(model[j].test for model in models) - now[j].test for j in range(t + 1)]
    return {"p_cl": statistics.mean(seen), "p_forget": statistics.mean(drops)}


def _test_then_train_views(num_steps: int, options: ProtocolOptions) -> list[View]:
    return [prefix(t) for t in range(1, long_enough(num_steps))]


@protocol(
    "test_then_train",
    "NED's: each step predicted by the model trained on the steps before it, then trained on",
    _test_then_train_views,
    reports=("stream_accuracy",),
)
def _test_then_train(
    accuracies: Mapping[str, StepAccuracies], num_steps: int, options: ProtocolOptions
) -> dict[str, Any]:
    # The stream starts once there is a model with history: step 2 is predicted by steps 0..1's.
    curve = {t: accuracies[prefix(t - 1).name][t].train for t in range(2, num_steps)}
    return {"stream_accuracy": statistics.mean(curve.values()), "curve": curve}


def mixed_view(split: int) -> View:
    """Steps 0..split with their training and validation images drawn from every step."""
    return View(f"mixed-0-{split}", tuple(range(split + 1)), mixed=True)


def _mixed_views(num_steps: int, options: ProtocolOptions) -> list[View]:
    return [mixed_view(split_step(num_steps, options))]


@protocol(
    "mixed_split",
    "Wild-Time's diagnostic: Eval-Fix's test steps, training images mixed from all steps",
    _mixed_views,
    reports=("ood_average", "ood_worst"),
)
def _mixed_split(
    accuracies: Mapping[str, StepAccuracies], num_steps: int, options: ProtocolOptions
) -> dict[str, Any]:
    split = split_step(num_steps, options)
    return out_of_distribution(accuracies[mixed_view(split).name], split, num_steps)
