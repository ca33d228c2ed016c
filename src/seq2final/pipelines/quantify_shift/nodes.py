"""Nodes that embed a sequence with PCA, measure W2 and 1-NN distances and tabulate them."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from itertools import repeat
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from threadpoolctl import threadpool_limits

from seq2final.config.parameters import QuantifyOptions
from seq2final.core.seeds import derived_seed
from seq2final.data.distances import (
    Embedded,
    conditional_wasserstein2,
    fit_pca_features,
    nearest_neighbour_distance,
    wasserstein2,
)
from seq2final.data.sequence import ShiftSequence, StepEntry
from seq2final.data.spec import SequenceSpec
from seq2final.reporting import plots
from seq2final.reporting.shift import consecutive_steps, relative_to_final

logger = logging.getLogger(__name__)


def embed_sequence(sequence: ShiftSequence, options: QuantifyOptions) -> dict[str, Any]:
    """PCA coordinates of every step's train set, the final test set, two source halves and
    the history (steps 0..T−1's train sets pooled).

    The halves (a seeded random split of the source train set) give the sanity value: the
    distance between two samples of one distribution at this sample size. The history is what
    a historical model trained on, so its distance to the final test set is the shift that
    model meets (docs/intensity.md, "Robustness slopes"); of a long history it reads a seeded
    draw of ``history_images`` (its exact W2 against the final test set would otherwise cost
    more than every other pair together).
    """
    steps = list(sequence.steps())
    train_sets = [step.split("train") for step in steps]
    test_set = steps[-1].split("test")
    seed = sequence.manifest.spec.seed
    train_features, test_features, k = fit_pca_features(
        train_sets, test_set, options.variance, options.max_components, seed
    )
    names = [f"{i}:{step.name}" for i, step in enumerate(steps)]
    embedded = [
        Embedded(name, features, labels)
        for name, features, (_, labels) in zip(names, train_features, train_sets, strict=True)
    ]
    order = np.random.RandomState(seed).permutation(len(embedded[0].labels))
    half = len(order) // 2
    source = embedded[0]
    history = embedded[0]  # one historical step: the history is it, measured once
    if len(embedded) > 2:
        features = np.concatenate([e.features for e in embedded[:-1]])
        labels = np.concatenate([e.labels for e in embedded[:-1]])
        name = f"0..{len(steps) - 2}"
        if len(labels) > options.history_images:
            draw = np.random.RandomState(derived_seed(seed, "history")).permutation(len(labels))
            kept = np.sort(draw[: options.history_images])
            features, labels = features[kept], labels[kept]
            name = f"{name} ({options.history_images} drawn)"
        history = Embedded(name, features, labels)
    halves = [
        Embedded(f"source half {i + 1}", source.features[part], source.labels[part])
        for i, part in enumerate((order[:half], order[half:]))
    ]
    return {
        "key": sequence.key,
        "support_intensity": [s.support_intensity for s in sequence.manifest.steps],
        "history_support_intensity": _history_intensity(sequence.manifest.steps),
        "components": k,
        "train": embedded,
        "test": Embedded(f"{len(steps) - 1}:test", test_features, test_set[1]),
        "halves": halves,
        "history": history,
    }


def _history_intensity(steps: list[StepEntry]) -> float | None:
    """The final step's support I against every historical step's support (the manifest's
    note); a sequence built before the note has it only where the history is step 0 alone."""
    final = steps[-1]
    if final.history_support_intensity is not None or len(steps) > 2:
        return final.history_support_intensity
    return final.support_intensity


def _wasserstein_pair(
    first: Embedded, second: Embedded, max_iterations: int
) -> tuple[float, float]:
    """Covariate and conditional W2 of one pair (the time they took goes to the log)."""
    start = time.perf_counter()
    pair = f"{first.name} vs {second.name}"
    covariate = wasserstein2(first.features, second.features, max_iterations, pair)
    conditional = conditional_wasserstein2(first, second, max_iterations)
    logger.info("W2 %s: %.1f s", pair, time.perf_counter() - start)
    return covariate, conditional


def measure_distances(
    embedding: dict[str, Any], options: QuantifyOptions
) -> dict[str, pd.DataFrame]:
    """Covariate and conditional W2 and the 1-NN distance for the half split, consecutive steps,
    each step vs final and the history (steps 0..T−1 pooled) vs final.

    The W2 pairs are independent exact solves, so they run in ``workers`` threads of this
    process: POT's network simplex and the cost matrices release the GIL, and threads neither
    fork after training's OpenMP threads (a forked pool hung in scikit-learn's OpenMP code) nor
    pay a process's start-up (docs/architecture.md, "Processes"). With several workers, BLAS
    keeps one thread per pair while they run, so the pairs do not oversubscribe the cores; a
    failing pair cancels those not yet started. The 1-NN distances follow in this thread:
    scikit-learn spreads each search over OpenMP threads itself, and its input checks swap the
    process's warning filters, which is not safe from two threads at once. A pair listed twice
    (the history of a two-step sequence is its step 0) is measured once.
    """
    train, test = embedding["train"], embedding["test"]
    pairs = [("half_split", embedding["halves"][0], embedding["halves"][1])]
    pairs += [("consecutive", train[t - 1], train[t]) for t in range(1, len(train))]
    pairs += [("to_final", train[t], test) for t in range(len(train))]
    pairs += [("history_to_final", embedding["history"], test)]
    unique = {(id(first), id(second)): (first, second) for _, first, second in pairs}
    firsts = [first for first, _ in unique.values()]
    seconds = [second for _, second in unique.values()]
    pool = ThreadPoolExecutor(max_workers=options.workers)
    try:
        with threadpool_limits(limits=1 if options.workers > 1 else None, user_api="blas"):
            solved = list(
                pool.map(_wasserstein_pair, firsts, seconds, repeat(options.max_iterations))
            )
    finally:
        pool.shutdown(cancel_futures=True)
    nearest = [
        nearest_neighbour_distance(a.features, b.features, f"{a.name} vs {b.name}")
        for a, b in zip(firsts, seconds, strict=True)
    ]
    measured = {ids: (*w2, nn) for ids, w2, nn in zip(unique, solved, nearest, strict=True)}
    results = [measured[(id(first), id(second))] for _, first, second in pairs]
    rows = [
        {
            "comparison": comparison,
            "first": first.name,
            "second": second.name,
            "first_size": len(first.labels),
            "second_size": len(second.labels),
            "components": embedding["components"],
            "w2_covariate": covariate,
            "w2_conditional": conditional,
            "nn1": nearest,
        }
        for (comparison, first, second), (covariate, conditional, nearest) in zip(
            pairs, results, strict=True
        )
    ]
    frame = pd.DataFrame(rows)
    counted = embedding.get("support_intensity") or [None]
    if counted[0] is not None:  # a support shift: the second set's step's counted I
        second = [0] + list(range(1, len(train))) + [len(train) - 1] * len(train)
        frame["support_intensity"] = [counted[t] for t in second] + [
            embedding["history_support_intensity"]  # against every historical step's support
        ]
    return {embedding["key"]: frame}


def tabulate_shift(
    distances: dict[str, Any], spec: SequenceSpec
) -> tuple[dict[str, pd.DataFrame], dict[str, str], dict[str, Figure]]:
    """CSV tables, a Markdown report and a figure for the run's sequence."""
    key = spec.key
    stored = distances[key]
    frame = stored() if callable(stored) else stored
    relative, steps = relative_to_final(frame), consecutive_steps(frame)
    report = "\n".join(
        [
            f"# Shift of `{key}`",
            "",
            "Distance of each step's train set to the final test set, divided by the final "
            "train-vs-test distance (paper Tables 5-6; 1 = no more shift than in-distribution): "
            "W2 of the images (W_X), W2 per class (W_X|Y), and the mean distance of a final test "
            "image to its nearest training image (1-NN, Control+Shift's).",
            "",
            relative.to_markdown(floatfmt=".2f"),
            "",
            "Consecutive steps, divided by the distance between two halves of the source train set.",
            "",
            steps.to_markdown(floatfmt=".2f"),
            "",
            *_support_lines(frame),
            f"Raw distances (PCA components: {int(frame['components'].iloc[0])}).",
            "",
            frame.drop(columns="components").to_markdown(index=False, floatfmt=".3f"),
            "",
        ]
    )
    tables = {
        f"{key}/relative_to_final": relative.rename_axis("metric").reset_index(),
        f"{key}/consecutive": steps.rename_axis("metric").reset_index(),
    }
    to_final = frame[frame["comparison"] == "to_final"]["first"].astype(str).tolist()[:-1]
    figure = plots.shift_profile(
        relative,
        f"{spec.name} on {spec.dataset}, seed {spec.seed}: "
        "how far each earlier step lies from the final step",
        key,
        to_final,
    )
    return tables, {key: report}, {key: figure}


def _support_lines(frame: pd.DataFrame) -> list[str]:
    """For a support shift, each step's intensity I: the share of its pool outside the source's
    support, counted exactly (docs/intensity.md)."""
    if "support_intensity" not in frame:
        return []
    steps = frame[frame["comparison"].isin(["half_split", "consecutive"])]
    table = pd.DataFrame({"step": steps["second"], "I": steps["support_intensity"]})
    return [
        "Support intensity I of each step (Control+Shift's: the share of its pool outside the "
        "source's support).",
        "",
        table.to_markdown(index=False, floatfmt=".3f"),
        "",
    ]
