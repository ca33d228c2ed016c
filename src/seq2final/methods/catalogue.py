"""The paper's 18 methods (paper Table 1 classes: 0 = reference, 1 = one model on all data,
2 = pre-train then adapt, 3 = sequential or joint over steps), registered in the paper's order."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from seq2final.methods.modes import METHODS, method

ORACLE = "oracle"

for _args in (
    ("oracle", "none", "scratch_oracle", "Oracle", 0, "reference: the final step with ample data (paper §3)"),
    ("baseline", "none", "scratch", "Baseline", 0, "reference: the final step alone (paper §3)"),
    ("erm", "none", "all_erm", "ERM", 1, "Vapnik 1991, on all steps"),
    ("irm", "none", "all_irm", "IRM", 1, "Arjovsky et al. 2019"),
    ("dro", "none", "all_dro", "DRO", 1, "Sagawa et al. 2020 (group DRO)"),
    ("ft", "erm", "ft", "FT", 2, "fine-tuning from ERM on history (paper §3)"),
    ("lp_ft", "erm", "lp_ft", "LP-FT", 2, "Kumar et al. 2022"),
    ("i_ft", "irm", "ft", "I-FT", 2, "IRM (Arjovsky et al. 2019), then fine-tuning (paper §3)"),
    ("d_ft", "dro", "ft", "D-FT", 2, "DRO (Sagawa et al. 2020), then fine-tuning (paper §3)"),
    ("st_1", "erm", "side_1", "ST-1", 2, "side-tuning, Zhang et al. 2020"),
    ("st_b", "erm", "side_b", "ST-B", 2, "side-tuning, Zhang et al. 2020"),
    ("sft", "sequential", "ft", "SFT", 3, "sequential fine-tuning (paper §3)"),
    ("ewc", "sequential_ewc", "ft", "EWC", 3, "Kirkpatrick et al. 2017"),
    ("sst_1", "sequential_side_1", "side_1", "SST-1", 3, "sequential side-tuning (paper §3)"),
    ("sst_b", "sequential_side_b", "side_b", "SST-B", 3, "sequential side-tuning (paper §3)"),
    ("jm", "none", "joint", "JM", 3, "joint model with adjacent-step L2 (paper §3)"),
    ("jst_1", "none", "joint_side_1", "JST-1", 3, "joint side-tuning (paper §3)"),
    ("jst_b", "none", "joint_side_b", "JST-B", 3, "joint side-tuning (paper §3)"),
):  # fmt: skip
    method(*_args)


def paper_columns() -> tuple[str, ...]:
    """The tables' column order: every registered method in registration order (the paper's,
    then any added), with the oracle moved last as the paper's tables show it."""
    return (*(name for name in METHODS if name != ORACLE), ORACLE)


@dataclass(frozen=True)
class JobNames:
    """The names a job goes by: the one it has in every view (terminal, MLflow, tables, figures,
    files) and the other names it answers to. :meth:`of` is the one place a job's name is
    decided; plans (``JobPlan.names``) and records (``names_of``) both read it here.

    A job can answer to several names: on ConvNets ``st_1`` and ``st_b`` train the same model, so
    the plan keeps one job for both. The paper's tables show it as ST-1 and leave ST-B empty;
    every other view follows, and lists the other names as the job's aliases.
    """

    name: str
    others: tuple[str, ...] = ()

    @classmethod
    def of(cls, method: str, asked: Iterable[str] = ()) -> JobNames:
        """The names of a job training ``method`` that was asked for as ``asked`` too: its first
        name in :func:`paper_columns` order, else its method; the others in the order given."""
        names = list(dict.fromkeys([method, *asked]))
        name = next((n for n in paper_columns() if n in names), method)
        return cls(name, tuple(n for n in names if n != name))

    def model_name(self, view: str | None) -> str:
        """The name of one view's model under a temporal protocol (``ft.0-2``): each view is a
        model of its own in MLflow."""
        return self.name if view is None else f"{self.name}.{view}"
