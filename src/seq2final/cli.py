"""Project command line: Kedro's ``run``, accepting the syntax our users type.

Researchers write ``kedro run --pipeline adapt_final --params method:st_b`` (the Kedro 0.18 forms).
Kedro 1.x only takes ``--pipelines`` and ``key=value``; this ``run`` takes both forms of each and
otherwise behaves exactly like Kedro's own, whose options it reuses. Problems with the user's input
end the command with one line instead of a traceback.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import yaml
from kedro.framework.cli.project import run as kedro_run
from kedro.framework.project import settings

from seq2final.core.errors import Seq2FinalError
from seq2final.core.startup import bootstrap_once
from seq2final.data.family import Member, is_family, members

_SEPARATORS = (":", "=")
_INT = re.compile(r"[-+]?(0|[1-9]\d*)")
_FLOAT = re.compile(r"[-+]?((0|[1-9]\d*)(\.\d*)?|\.\d+)([eE][-+]?\d+)?")


def parse_params(text: str) -> dict[str, Any]:
    """Parse ``key:value,key=value`` pairs (the first ``:`` or ``=`` separates; values keep later ones).

    A comma-separated piece with no separator continues the previous value, so a value may itself
    contain commas. Dotted keys (``quantify_shift.workers:1``) address nested parameters.
    """
    pairs: list[list[str]] = []
    for piece in text.split(",") if text.strip() else []:
        cut = min((i for i in (piece.find(s) for s in _SEPARATORS) if i >= 0), default=-1)
        if cut <= 0:
            if not pairs or not piece.strip():
                raise Seq2FinalError(
                    f"--params item '{piece}' has no key; valid: key:value or key=value, comma-separated"
                )
            pairs[-1][1] += "," + piece
            continue
        pairs.append([piece[:cut].strip(), piece[cut + 1 :]])
    params: dict[str, Any] = {}
    for key, value in pairs:
        *parents, leaf = key.split(".")
        target = params
        for part in parents:
            target = target.setdefault(part, {})
            if not isinstance(target, dict):
                raise Seq2FinalError(f"--params key '{key}' sets inside '{part}', which is a value")
        target[leaf] = typed_value(value.strip())
    return params


def typed_value(text: str) -> Any:
    """A number, boolean or null when the text is plainly one; a list or mapping only when written
    as one (``[a, b]``, ``{k: v}``); otherwise the string exactly as typed.

    YAML alone would turn ``rotation:::`` into a mapping, ``2:30`` into 150, ``010`` into 8 and
    ``#x`` into null; a sequence spec or a path must reach the validator as the text typed.
    """
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "none", "~"):
        return None
    if text[:1] in "[{":
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            return text
        if isinstance(value, list | dict):
            return value
    return text


def _params_callback(ctx: click.Context, param: click.Parameter, value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    try:
        return parse_params(value or "")
    except Seq2FinalError as error:
        raise click.BadParameter(str(error)) from None


def _user_error(error: BaseException | None) -> Seq2FinalError | None:
    """The :class:`Seq2FinalError` behind ``error``, even when Kedro wrapped it (DatasetError)."""
    while error is not None:
        if isinstance(error, Seq2FinalError):
            return error
        error = error.__cause__ or error.__context__
    return None


class _FailureReport(logging.Filter):
    """Holds back what Kedro and kedro-mlflow log when a node fails, until the cause is known.

    For a user error (a :class:`Seq2FinalError`) the node-failure block and the resume hint only
    repeat, at length, the one ``Error:`` line we print; they are dropped.
    For anything else they are logged as usual, just before the traceback.
    """

    _HELD = (
        ("kedro.pipeline.node", "failed with error"),
        ("kedro.runner", "nodes that have not run"),
        ("kedro.runner", "No nodes ran"),
    )

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []
        self._handlers: list[logging.Handler] = []

    def filter(self, record: logging.LogRecord) -> bool:
        for logger, text in self._HELD:
            if record.name.startswith(logger) and text in record.getMessage():
                if record not in self.records:
                    self.records.append(record)
                return False
        return True

    @contextlib.contextmanager
    def attached(self) -> Iterator[None]:
        self._handlers = list(logging.getLogger().handlers)
        for handler in self._handlers:
            handler.addFilter(self)
        try:
            yield
        finally:
            for handler in self._handlers:
                handler.removeFilter(self)

    def release(self) -> None:
        """Log the held records as they would have been (used when the failure is a bug)."""
        for handler in self._handlers:
            handler.removeFilter(self)
        for record in self.records:
            for handler in self._handlers:
                if record.levelno >= handler.level:
                    handler.handle(record)
        self.records.clear()


def _build_run_command() -> click.Command:
    """Kedro's ``run`` with our ``--params`` parser and ``--pipeline`` as a quiet alias."""
    command = copy.copy(kedro_run)
    command.params = []
    for option in kedro_run.params:
        option = copy.copy(option)
        if option.name == "params":
            option.callback = _params_callback
        command.params.append(option)

    def callback(**kwargs: Any) -> Any:
        pipeline = kwargs.pop("pipeline")
        if pipeline:
            kwargs["pipelines"] = [*kwargs["pipelines"], *pipeline.split(",")]
        held = _FailureReport()
        with held.attached():
            try:
                return _run_members(kwargs)
            except Exception as error:
                cause = _user_error(error)
                if cause is None:
                    raise
                held.records.clear()
                raise click.ClickException(str(cause)) from None
            finally:
                held.release()

    command.callback = callback
    return command


def _run_members(kwargs: dict[str, Any]) -> Any:
    """Kedro's ``run``; on a family (docs/intensity.md), once per member (each an ordinary run
    of the asked pipelines on that sequence), then the ``robustness`` pipeline over them all
    where the asked pipelines include ``evaluate`` or ``robustness`` (or are the default).
    Every member is checked before the first trains (the session's parameter check covers the
    whole family)."""
    family = _family(kwargs)
    asked = kwargs["pipelines"]
    run = kedro_run.callback
    assert run is not None  # click's Command.callback is optional; Kedro's run has one
    each = [name for name in asked if name != "robustness"]
    if not family or (asked and not each):
        return run(pipeline=None, **kwargs)
    for member in family:
        logging.getLogger(__name__).info("family member %g: %s", member.intensity, member.sequence)
        params = {**kwargs["params"], "sequence": member.sequence, "intensities": None}
        run(pipeline=None, **{**kwargs, "params": params, "pipelines": each})
    if not asked or "evaluate" in asked or "robustness" in asked:
        return run(pipeline=None, **{**kwargs, "pipelines": ["robustness"]})
    return None


def _family(kwargs: dict[str, Any]) -> tuple[Member, ...]:
    """The members of the family the run's parameters ask for (none for one sequence). The
    parameters are read as the session will read them, and a family is checked whole here, so
    a bad member stops the run before the first member trains."""
    # lazy: the checks import torch and every registry, which `kedro --help` need not load
    from seq2final.config.checks import validate_parameters

    bootstrap_once(Path.cwd())
    loader = settings.CONFIG_LOADER_CLASS(
        conf_source=kwargs.get("conf_source") or str(Path.cwd() / settings.CONF_SOURCE),
        env=kwargs.get("env"),
        runtime_params=kwargs["params"],
        **settings.CONFIG_LOADER_ARGS,
    )
    parameters = loader["parameters"]
    sequence, intensities = str(parameters.get("sequence")), parameters.get("intensities")
    if not is_family(sequence, intensities):
        return ()
    validate_parameters(parameters)
    return members(sequence, intensities)


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, name=__file__)
def cli() -> None:
    """Command line tools for seq2final."""


cli.add_command(_build_run_command(), name="run")


@cli.command("sweep")
@click.option(
    "--sequences", help="Comma list of sequences, presets or specs (default: parameter sequence)."
)
@click.option("--archs", help="Comma list of architectures, or all (default: parameter arch).")
@click.option("--methods", help="Comma list of methods, or all (the default).")
@click.option("--pairs", help="Comma list of historical:final mode pairs, instead of --methods.")
@click.option("--seeds", help="Comma list of seeds (default: each sequence's own).")
@click.option("--budget", help="Tuning budget (default: parameter budget).")
@click.option("--dataset", help="Source dataset for every sequence.")
@click.option("--data-path", help="File or folder the dataset reads.")
@click.option("--workers", type=int, help="Start a local cluster of N worker processes.")
@click.option("--scheduler", help="Use the Dask scheduler at this address (tcp://host:port).")
@click.option("--threads", type=int, help="Torch threads per worker (default 1).")
@click.option("--env", "-e", help="Kedro configuration environment.")
@click.option("--params", default="", callback=_params_callback, help="More run parameters.")
@click.option("--dry-run", is_flag=True, help="Print the graph and what is done; run nothing.")
def sweep(**options: Any) -> None:
    """Run every sequence × arch × method × seed on a Dask cluster, skipping what is finished."""
    from seq2final.sweep.command import SweepOptions  # lazy: dask loads only for sweeps
    from seq2final.sweep.command import sweep as run_sweep  # lazy: as above

    try:
        status = run_sweep(SweepOptions(**options), click.echo)
    except Seq2FinalError as error:
        raise click.ClickException(str(error)) from None
    raise SystemExit(status)


@cli.command("bench")
@click.option("--sections", help="Comma list of sections (default: all; with --quick: fit,fused).")
@click.option(
    "--quick",
    is_flag=True,
    help="Short fit and fused measurements (K <= 8), no data needed; written to "
    "data/08_reporting/bench/, never docs/benchmarks.md.",
)
@click.option(
    "--archs",
    help="Architectures of fit and fused (default: convnet_4,densenet_1,resnet_4; with --quick: "
    "convnet_4,resnet_4).",
)
@click.option("--data-path", default="data/01_raw/cifar10.npz", help="CIFAR-10 npz (search).")
@click.option(
    "--budgets", default="quick,default,tpe30,efficient", help="Budgets the search compares."
)
@click.option("--seeds", type=int, default=3, help="Seeds of the search section.")
@click.option("--device", default="auto", help="Device to measure on (auto, cpu, cuda:N).")
@click.option("--env", "-e", help="Kedro configuration environment (budgets, training).")
@click.option("--output", help="Folder for bench.json and benchmarks.md instead of the defaults.")
@click.option(
    "--policy",
    help="The replay section's halving policy: FIRST,ETA[,GUARD][,known] (first rung in epochs, "
    "1/ETA go on per rung, the best of each GUARD value passes the first rung, known: the "
    "previous step's winner goes on at every rung; default: the policy frozen on the "
    "development set).",
)  # fmt: skip
def bench(**options: Any) -> None:
    """Measure speed and search efficiency; write docs/benchmarks.md (--quick: its own page)."""
    from seq2final.bench.command import BenchOptions  # lazy: benchmark code loads only here
    from seq2final.bench.command import bench as run_bench  # lazy: as above

    try:
        run_bench(BenchOptions(**options), click.echo)
    except Seq2FinalError as error:
        raise click.ClickException(str(error)) from None


@cli.command("services")
@click.argument("action", type=click.Choice(["start", "stop"]))
def services(action: str) -> None:
    """Start (or stop) a local PostgreSQL and an MLflow server on it, for sweeps on this machine."""
    from seq2final.sweep import services as local  # lazy: only this command starts servers

    try:
        if action == "stop":
            local.stop_local_services()
            click.echo("services stopped")
            return
        database, optuna_url, mlflow_url = local.start_local_services()
    except Seq2FinalError as error:
        raise click.ClickException(str(error)) from None
    click.echo(
        f"PostgreSQL on 127.0.0.1:{database.port}, MLflow server at {mlflow_url}\n"
        "For sweeps that use them, put this in conf/local/parameters.yml:\n"
        f"  tuning:\n    storage: {optuna_url}\n"
        f"  mlflow:\n    tracking_uri: {mlflow_url}\n"
        f"The UI: {mlflow_url}/#/experiments?workflowType=machine_learning\n"
        "Stop both with: make services-stop"
    )
