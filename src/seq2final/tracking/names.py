"""What tracking settles before any work: the names runs and models get, and checks on them.

Kept light (MLflow only, no torch) because the project's hooks import it for every command.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from seq2final.config.checks import CheckedRun
from seq2final.core.errors import Seq2FinalError
from seq2final.methods import JobNames
from seq2final.reporting.tables import names_of
from seq2final.runs.plans import JobPlan, RunPlan
from seq2final.training.records import ResultRecord

NAME_FIELDS = ("sequence", "dataset", "arch", "method", "budget", "seed")


def safe_name(text: str) -> str:
    """``text`` with characters other than letters, digits, ``_ . + -`` replaced by ``-``.

    Sequence spec strings (``source100:rotation60``) are valid sequence names but not valid parts
    of a registered model's name, which MLflow keeps free of ``:`` and ``/``.
    """
    return re.sub(r"[^A-Za-z0-9_.+-]", "-", text)


def render_name(template: str, what: str, fields: dict[str, Any]) -> str:
    """Fill a name template from a job's fields; an unknown field is a one-line error."""
    try:
        return template.format(**{k: safe_name(str(v)) for k, v in fields.items()})
    except (KeyError, IndexError, ValueError) as error:
        raise Seq2FinalError(
            f"parameter 'mlflow.{what}' = {template!r} is not a valid template ({error}); "
            f"fields: {', '.join('{' + f + '}' for f in NAME_FIELDS)}"
        ) from None


@dataclass(frozen=True)
class MlflowNames:
    """The MLflow names of a job (or of a sequence's summary): its experiment, its registered model
    and the best model's, rendered from the ``mlflow`` templates."""

    experiment: str
    registered_model: str
    best_model: str

    @classmethod
    def of(cls, templates: Any, **fields: Any) -> MlflowNames:
        missing = set(NAME_FIELDS) - set(fields)
        assert not missing, f"name fields missing: {missing}"
        return cls(
            render_name(templates.experiment, "experiment", fields),
            render_name(templates.registered_model, "registered_model", fields),
            render_name(templates.best_model, "best_model", fields),
        )


def sequence_names(
    templates: Any, sequence: str, dataset: str, seed: int, arch: str = "all"
) -> MlflowNames:
    """The names of a sequence's summary run and best models: the job templates, with fields no
    single job fixes (method, budget; the architecture unless given) rendered as placeholders."""
    return MlflowNames.of(
        templates, sequence=sequence, dataset=dataset, arch=arch, method="summary",
        budget="all", seed=seed,
    )  # fmt: skip


@contextmanager
def environment(**values: str) -> Iterator[None]:
    """Set environment variables for the duration of a block (MLflow reads many at call time)."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def fail_fast() -> contextlib.AbstractContextManager[None]:
    """MLflow's HTTP client retries an unreachable server for minutes; a first check should not."""
    return environment(MLFLOW_HTTP_REQUEST_MAX_RETRIES="0", MLFLOW_HTTP_REQUEST_TIMEOUT="10")


def check_experiment_names(names: list[str]) -> None:
    """MLflow refuses an empty experiment name, but only when it first creates one: after the
    training. Refuse it before."""
    for name in names:
        if not name.strip():
            raise Seq2FinalError(
                f"parameter 'mlflow.experiment' gives the empty experiment name {name!r}; MLflow "
                "needs a name, e.g. 'seq2final/{sequence}'"
            )


# (registry URI, name) pairs MLflow accepted in this process: whether a registry takes a name
# does not change while it runs, and a session asks about every job's names (one query each).
_ACCEPTED_NAMES: set[tuple[str | None, str]] = set()


def check_registry_names(client: MlflowClient, names: list[str]) -> None:
    """Ask MLflow itself whether it accepts each registered-model name, before any training;
    each name once per model registry and process."""
    registry = client._registry_uri  # where get_registered_model asks; MLflow has no public getter
    for name in dict.fromkeys(names):
        if (registry, name) in _ACCEPTED_NAMES:
            continue
        try:
            client.get_registered_model(name)
        except MlflowException as error:
            if error.error_code == "INVALID_PARAMETER_VALUE":
                raise Seq2FinalError(
                    f"MLflow refuses the registered model name '{name}': "
                    f"{str(error).splitlines()[0]}"
                ) from None
            if error.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise Seq2FinalError(
                    f"could not check the registered model name '{name}' with MLflow: "
                    f"{str(error).splitlines()[0]}"
                ) from None
        _ACCEPTED_NAMES.add((registry, name))


def mlflow_names(plan: RunPlan, job: JobPlan, record: ResultRecord | None = None) -> MlflowNames:
    """A job's experiment and registered-model names: under a temporal protocol, its view's model
    name (``record``: see :func:`shown_names`). The tracking hook checks these before any work."""
    view = job.view.name if job.view is not None else None
    return MlflowNames.of(
        plan.mlflow, **plan_fields(plan, shown_names(job, record).model_name(view))
    )


def plan_fields(plan: RunPlan, method: str) -> dict[str, Any]:
    """The name-template fields of one of the plan's jobs."""
    return {
        "sequence": plan.sequence_name,
        "dataset": plan.dataset,
        "arch": plan.arch,
        "method": method,
        "budget": plan.budget_name,
        "seed": plan.seed,
    }


def run_fields(run: CheckedRun) -> dict[str, Any]:
    """The name-template fields every job of a checked run shares (all but its method): those
    :func:`plan_fields` reads from the run's plan, which has them from the same checked run."""
    spec = run.spec
    return {
        "sequence": spec.name,
        "dataset": spec.dataset,
        "arch": run.parameters.arch,
        "budget": run.parameters.budget,
        "seed": spec.seed,
    }


def shown_names(job: JobPlan, record: ResultRecord | None) -> JobNames:
    """The names a job goes by in MLflow: those the tables, figures and terminal give it, so a
    method is found under one name everywhere. A job trained now has no record yet: its names
    are those the run asked for, which its record will keep. A job trained earlier and logged now
    goes by its record's names, as in the tables."""
    return job.names if record is None else names_of(record)
