"""The paper's result tables from result records: cells, the bold/italic rules, and their renderings.

Two layouts (paper §4 and Appendix E):

* **Table 2** (main text): one value per method, the mean over architectures; bold when within
  ``tolerance`` of the best non-oracle mean, italic when within ``tolerance`` of (or above) the
  oracle mean. The original code never implemented this rule; it is written here
  from the paper's text.
* **Tables 8–13** (appendix): one row per architecture, one column per method in the paper's order,
  with the per-architecture rule of the original ``create_latex_table``, a Mean
  row with its paired rule (mean(d) − std(d) < 0), and a Std row.

A cell is the mean over seeds (and its sample standard deviation when there are several); a cell
with no result is missing, never zero. Styles are computed on numbers, then rendered as Markdown or
LaTeX, so every format shows the same emphasis.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from operator import attrgetter
from typing import Literal

import numpy as np
import pandas as pd

from seq2final.methods import ORACLE, JobNames, paper_columns
from seq2final.models import ARCHITECTURES
from seq2final.training.records import ResultRecord

Style = Literal["", "bold", "italic", "bold_italic"]

TOLERANCE = 0.02
# "Within 0.02" must hold for .62 − .60, which floats make 0.020000000000000018.
_EPS = 1e-9


def cells(
    records: Iterable[ResultRecord], metric: str | Callable[[ResultRecord], float] = "test_accuracy"
) -> pd.DataFrame:
    """One row per (arch, method) cell of ``metric`` (a record's field, or a function of it):
    mean and sample std over seeds, and the seed count.

    A job reported under several names (on ConvNets ``st_1`` is ``st_b``'s job) fills the first
    name in the paper's order only, as the paper's tables show ST-1 and leave ST-B empty there.
    """
    value = metric if callable(metric) else attrgetter(metric)
    return seed_cells((r.arch, shown_name(r), r.seed, float(value(r))) for r in records)


def seed_cells(values: Iterable[tuple[str, str, int, float]]) -> pd.DataFrame:
    """One row per (arch, method) cell from ``(arch, method, seed, value)``: mean and sample std
    over seeds, and the seed count."""
    frame = pd.DataFrame(list(values), columns=["arch", "method", "seed", "value"])
    grouped = frame.groupby(["arch", "method"])["value"]
    return pd.DataFrame(
        {"mean": grouped.mean(), "std": grouped.std(ddof=1), "seeds": grouped.count()}
    ).reset_index()


def report_folder(sequence: str, dataset: str) -> str:
    """The folder a sequence's (or a family's: ``@*`` reads ``@I``) tables and figures go to,
    under each reporting dataset."""
    return f"{sequence}-{dataset}".replace(":", "-").replace("/", "-").replace("*", "I")


def names_of(record: ResultRecord) -> JobNames:
    """A finished job's names, read from its record (:class:`seq2final.methods.JobNames`)."""
    return JobNames.of(record.method, record.aliases)


def shown_name(record: ResultRecord) -> str:
    """The one name a job has everywhere: ``st_1`` for the ConvNet job that also answers to
    ``st_b``."""
    return names_of(record).name


def total_train_flops(record: ResultRecord) -> int:
    """A job's training FLOPs with those of the historical states it continues (shared by the
    methods that continue them, counted in full for each: what reproducing the method costs)."""
    return (record.train_flops or 0) + sum(record.shared_train_flops().values())


def train_flops_once(records: Iterable[ResultRecord]) -> int:
    """The training FLOPs of several jobs together (a protocol's views, a study's protocols):
    each job's own fits, and each historical state they share once."""
    records = list(records)
    shared = {
        key: flops for record in records for key, flops in record.shared_train_flops().items()
    }
    return sum(record.train_flops or 0 for record in records) + sum(shared.values())


def arch_sort_key(arch: str) -> tuple[int, int, str]:
    """Rows grouped by family in the order families were registered, and within a family in
    registry order (ConvNet, DenseNet, ResNet, each by depth, as the paper's rows run);
    unregistered architectures after, by name."""
    if arch not in ARCHITECTURES:
        return len(ARCHITECTURES), 0, arch
    families = list(dict.fromkeys(entry.family for entry in ARCHITECTURES.values()))
    return families.index(ARCHITECTURES[arch].family), list(ARCHITECTURES).index(arch), arch


@dataclass
class ResultTable:
    """Architectures × methods: means, stds over seeds, seed counts, and each cell's style."""

    means: pd.DataFrame
    stds: pd.DataFrame
    seeds: pd.DataFrame
    styles: pd.DataFrame
    summary: pd.DataFrame  # rows "Mean" and "Std" over architectures
    summary_styles: pd.Series  # the Mean row's styles

    @classmethod
    def from_cells(cls, table_cells: pd.DataFrame, tolerance: float = TOLERANCE) -> ResultTable:
        methods = [m for m in paper_columns() if m in set(table_cells["method"])]
        methods += sorted(set(table_cells["method"]) - set(methods))
        archs = sorted(set(table_cells["arch"]), key=arch_sort_key)

        def pivot(column: str) -> pd.DataFrame:
            wide = table_cells.pivot(index="arch", columns="method", values=column)
            return wide.reindex(index=archs, columns=methods)

        means = pivot("mean")
        styles = means.apply(lambda row: per_arch_styles(row, tolerance), axis=1)
        summary = pd.DataFrame(
            {"Mean": means.mean(axis=0), "Std": means.std(axis=0, ddof=0)}
        ).T.reindex(columns=methods)
        return cls(means, pivot("std"), pivot("seeds"), styles, summary, mean_row_styles(means))


def per_arch_styles(row: pd.Series, tolerance: float = TOLERANCE) -> pd.Series:
    """The original code's per-architecture rule.

    Bold italic when at least the oracle minus ``tolerance``; otherwise bold when within
    ``tolerance`` of the best non-oracle method. The oracle's own cell is never styled; without an
    oracle only the bold rule applies.
    """
    oracle = row.get(ORACLE, np.nan)
    others = row.drop(ORACLE, errors="ignore")
    best = others.max()
    styles = pd.Series("", index=row.index, dtype=object)
    for method, value in others.items():
        if np.isnan(value):
            continue
        if not np.isnan(oracle) and value >= oracle - tolerance - _EPS:
            styles[method] = "bold_italic"
        elif best - value <= tolerance + _EPS:
            styles[method] = "bold"
    return styles


def mean_row_styles(means: pd.DataFrame) -> pd.Series:
    """The Mean-row rule: a paired comparison over the architectures shared.

    With d = reference − method over the architectures both have, a method is equivalent to the
    reference when mean(d) − std(d) < 0 (population std). Equivalent to the oracle: bold italic;
    else equivalent to the best non-oracle mean: bold. The original left the best method itself
    unbolded (its d is all zeros, and 0 < 0 fails); here it is bold, as its column is the best.
    """
    column_means = means.mean(axis=0)
    others = column_means.drop(ORACLE, errors="ignore").dropna()
    styles = pd.Series("", index=means.columns, dtype=object)
    if others.empty:
        return styles
    best = others.idxmax()
    for method in others.index:
        if ORACLE in means and _equivalent(means[ORACLE], means[method]):
            styles[method] = "bold_italic"
        elif method == best or _equivalent(means[best], means[method]):
            styles[method] = "bold"
    return styles


def _equivalent(reference: pd.Series, method: pd.Series) -> bool:
    d = (reference - method).dropna()
    return bool(len(d)) and float(d.mean() - d.std(ddof=0)) < 0


def table2_styles(method_means: pd.Series, tolerance: float = TOLERANCE) -> pd.Series:
    """The main text's Table 2 rule on per-method means over architectures.

    Bold: within ``tolerance`` of the best non-oracle mean. Italic: within ``tolerance`` of the
    oracle mean, or above it. Both can hold (bold italic). The oracle is never styled.
    """
    oracle = method_means.get(ORACLE, np.nan)
    others = method_means.drop(ORACLE, errors="ignore").dropna()
    styles = pd.Series("", index=method_means.index, dtype=object)
    if others.empty:
        return styles
    best = others.max()
    for method, value in others.items():
        bold = best - value <= tolerance + _EPS
        italic = not np.isnan(oracle) and value >= oracle - tolerance - _EPS
        styles[method] = {
            (True, True): "bold_italic", (True, False): "bold", (False, True): "italic",
            (False, False): "",
        }[(bold, italic)]  # fmt: skip
    return styles


def format_number(value: float, std: float | None = None) -> str:
    """The paper's style: two decimals, no leading zero (".54"), "±.02" over seeds; "–" if none."""
    if value is None or np.isnan(value):
        return "–"
    text = f"{value:.2f}".replace("0.", ".", 1)
    if std is not None and not np.isnan(std):
        text += f" ± {std:.2f}".replace("0.", ".", 1)
    return text


_MARKDOWN = {"": "{}", "bold": "**{}**", "italic": "*{}*", "bold_italic": "***{}***"}
_LATEX = {
    "": "{}",
    "bold": r"\textbf{{{}}}",
    "italic": r"\textit{{{}}}",
    "bold_italic": r"\textit{{\textbf{{{}}}}}",
}


def render(table: ResultTable, fmt: Literal["markdown", "latex"]) -> str:
    """Tables 8–13 as Markdown or LaTeX, with a Mean and a Std row."""
    wrap = _MARKDOWN if fmt == "markdown" else _LATEX
    header = ["arch", *table.means.columns]
    body = []
    for arch in table.means.index:
        body.append(
            [arch]
            + [
                wrap[table.styles.at[arch, m] or ""].format(
                    format_number(table.means.at[arch, m], table.stds.at[arch, m])
                )
                for m in table.means.columns
            ]
        )
    body.append(
        ["Mean"]
        + [
            wrap[table.summary_styles.get(m, "") or ""].format(
                format_number(table.summary.at["Mean", m])
            )
            for m in table.means.columns
        ]
    )
    body.append(["Std"] + [format_number(table.summary.at["Std", m]) for m in table.means.columns])
    if fmt == "markdown":
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in body]
        return "\n".join(lines) + "\n"
    body = [[cell.replace("–", "---") for cell in row] for row in body]  # the paper's empty cell
    latex_header = " & ".join(h.replace("_", r"\_") for h in header)
    lines = [
        r"\begin{tabular}{l" + "c" * (len(header) - 1) + "}",
        r"\toprule",
        latex_header + r" \\",
    ]
    lines.append(r"\midrule")
    lines += [
        " & ".join(cell.replace("_", r"\_") if i == 0 else cell for i, cell in enumerate(row))
        + r" \\"
        for row in body
    ]
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def to_csv_frame(table: ResultTable) -> pd.DataFrame:
    """Numbers only, long form: one row per cell (missing cells absent), plus Mean and Std rows."""
    long = table.means.stack(future_stack=True).rename("mean").to_frame()
    long["std"] = table.stds.stack(future_stack=True)
    long["seeds"] = table.seeds.stack(future_stack=True)
    long["style"] = table.styles.stack(future_stack=True)
    long = long.dropna(subset=["mean"]).reset_index()
    summary = table.summary.stack(future_stack=True).rename("mean").reset_index()
    summary.columns = ["arch", "method", "mean"]
    summary["style"] = [
        table.summary_styles.get(m, "") if a == "Mean" else ""
        for a, m in zip(summary["arch"], summary["method"], strict=True)
    ]
    return pd.concat([long, summary.dropna(subset=["mean"])], ignore_index=True)


def from_csv_frame(frame: pd.DataFrame) -> ResultTable:
    """The inverse of :func:`to_csv_frame`: a table read back from its CSV renders identically."""
    cells_part = frame[~frame["arch"].isin(["Mean", "Std"])]
    methods = [m for m in paper_columns() if m in set(frame["method"])]
    methods += sorted(set(frame["method"]) - set(methods))
    archs = sorted(set(cells_part["arch"]), key=arch_sort_key)

    def pivot(column: str, part: pd.DataFrame, index: list[str]) -> pd.DataFrame:
        return part.pivot(index="arch", columns="method", values=column).reindex(
            index=index, columns=methods
        )

    summary_part = frame[frame["arch"].isin(["Mean", "Std"])]
    styles = pivot("style", cells_part, archs).fillna("")
    mean_styles = pivot("style", summary_part, ["Mean", "Std"]).loc["Mean"].fillna("")
    return ResultTable(
        pivot("mean", cells_part, archs).astype(float),
        pivot("std", cells_part, archs).astype(float),
        pivot("seeds", cells_part, archs),
        styles,
        pivot("mean", summary_part, ["Mean", "Std"]).astype(float),
        mean_styles,
    )
