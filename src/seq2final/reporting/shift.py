"""Shift distances in the paper's layout (Tables 5-6): each step's distance to the final test set
over the final step's own train-vs-test distance, and consecutive steps' over two halves of the
source; read by ``quantify_shift``'s report and ``evaluate``'s shift scores."""

from __future__ import annotations

import pandas as pd

MEASURES = {"W_X": "w2_covariate", "W_X|Y": "w2_conditional", "1-NN": "nn1"}
"""Row name → the distances' column; a column a frame lacks (1-NN before it was measured) is
left out."""


def _measures(distances: pd.DataFrame) -> dict[str, str]:
    return {name: column for name, column in MEASURES.items() if column in distances}


def _named(label: str, row: pd.Series, *columns: str) -> str:
    """``label`` and the steps' own names out of a distance row's ``<index>:<name>`` (a user's
    period, ``2019``; a shift, ``corruption``), joined by →; ``label`` alone for a frame without
    names."""
    if not all(column in row for column in columns):
        return label
    return f"{label} " + "→".join(str(row[c]).split(":", 1)[-1] for c in columns)


def relative_to_final(distances: pd.DataFrame) -> pd.DataFrame:
    """W^{t,T} ÷ W^{T,T} per earlier step t: a column per step, named by the paper's index and
    the step's own name (``W^{0,3} 2019``), a row per measure."""
    measures = _measures(distances)
    to_final = distances[distances["comparison"] == "to_final"].reset_index(drop=True)
    final = to_final.iloc[-1]
    last = len(to_final) - 1
    return pd.DataFrame(
        {
            _named(f"W^{{{t},{last}}}", to_final.loc[t], "first"): [
                to_final.loc[t, c] / final[c] for c in measures.values()
            ]
            for t in range(last)
        },
        index=list(measures),
    )


def consecutive_steps(distances: pd.DataFrame) -> pd.DataFrame:
    """W^{t,t+1} ÷ the distance between two halves of the source train set, a column per pair
    named by index and names (``W^{0,1} 2019→2020``)."""
    measures = _measures(distances)
    half = distances[distances["comparison"] == "half_split"].iloc[0]
    consecutive = distances[distances["comparison"] == "consecutive"].reset_index(drop=True)
    return pd.DataFrame(
        {
            _named(f"W^{{{t},{t + 1}}}", row, "first", "second"): [
                row[c] / half[c] for c in measures.values()
            ]
            for t, row in consecutive.iterrows()
        },
        index=list(measures),
    )
