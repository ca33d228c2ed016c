"""Paired comparisons of two methods over the (architecture, seed) pairs both have."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from seq2final.training.records import ResultRecord


def paired_differences(
    records: Iterable[ResultRecord], method: str, reference: str, metric: str = "test_accuracy"
) -> pd.Series:
    """``method − reference`` per (arch, seed) that both have a result for, nothing else.

    Pairing on the architecture and the seed removes what they share (an easy architecture, a
    lucky split) from the comparison; unpaired results are left out rather than averaged in.
    """
    table = cells_by_seed(records, metric)
    wide = table.pivot_table(index=["arch", "seed"], columns="method", values="value")
    if method not in wide or reference not in wide:
        return pd.Series(dtype=float)
    return (wide[method] - wide[reference]).dropna()


def cells_by_seed(records: Iterable[ResultRecord], metric: str) -> pd.DataFrame:
    """One row per (arch, method, seed) under every name a job answers to (``st_1`` and ``st_b``
    on a ConvNet), so a comparison can name either."""
    rows = []
    for record in records:
        for name in dict.fromkeys([record.method, *record.aliases]):
            rows.append(
                {"arch": record.arch, "method": name, "seed": record.seed,
                 "value": float(getattr(record, metric))}
            )  # fmt: skip
    return pd.DataFrame(rows, columns=["arch", "method", "seed", "value"])


def paired_comparison(
    records: Iterable[ResultRecord],
    method: str,
    reference: str,
    metric: str = "test_accuracy",
    resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, Any]:
    """Mean paired difference ``method − reference`` with a percentile bootstrap interval.

    The interval resamples the (arch, seed) pairs; with fewer than two pairs there is nothing to
    resample and it is left missing (NaN), never made up.
    """
    differences = paired_differences(list(records), method, reference, metric)
    low = high = float("nan")
    if len(differences) >= 2 and differences.nunique() > 1:
        from scipy.stats import bootstrap  # lazy: see docs/architecture.md, "Start-up"

        interval = bootstrap(
            (differences.to_numpy(),),
            np.mean,
            n_resamples=resamples,
            confidence_level=confidence,
            method="percentile",
            rng=np.random.default_rng(seed),
        ).confidence_interval
        low, high = float(interval.low), float(interval.high)
    elif len(differences) >= 2:  # every pair differs by the same amount
        low = high = float(differences.iloc[0])
    return {
        "method": method,
        "reference": reference,
        "metric": metric,
        "pairs": len(differences),
        "mean_difference": float(differences.mean()) if len(differences) else float("nan"),
        "ci_low": low,
        "ci_high": high,
        "confidence": confidence,
    }
