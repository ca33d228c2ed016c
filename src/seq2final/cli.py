"""Project command line: Kedro's ``run``, accepting the syntax our users type.

Researchers write ``kedro run --pipeline adapt_final --params method:st_b`` (the Kedro 0.18 forms).
Kedro 1.x only takes ``--pipelines`` and ``key=value``; this ``run`` takes both forms of each and
otherwise behaves exactly like Kedro's own, whose options it reuses. Problems with the user's input
end the command with one line instead of a traceback.
"""

from __future__ import annotations

import copy
from typing import Any

import click
from kedro.framework.cli.project import run as kedro_run
from omegaconf import OmegaConf

from seq2final.errors import Seq2FinalError

_SEPARATORS = (":", "=")


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
    dotlist = [f"{key}={value.strip()}" for key, value in pairs]
    return OmegaConf.to_container(OmegaConf.from_dotlist(dotlist)) if dotlist else {}


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
        try:
            return kedro_run.callback(pipeline=None, **kwargs)
        except Exception as error:
            cause = _user_error(error)
            if cause is None:
                raise
            raise click.ClickException(str(cause)) from None

    command.callback = callback
    return command


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, name=__file__)
def cli() -> None:
    """Command line tools for seq2final."""


cli.add_command(_build_run_command(), name="run")
