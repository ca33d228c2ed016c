"""Model wrappers: a mode that changes the model it trains, and trains it in phases.

A wrapper does two things a method may need beyond a loss term or a callback
(docs/extending.md, "A model trained in phases"):

* :meth:`ModelWrapper.wrap` transforms the model a fit starts from (re-initialises or adds
  modules); the mode calls it where it builds that model, before the fit's optimiser exists. The
  model must stay one a store can rebuild (a registered architecture or the joint model);
* :meth:`ModelWrapper.phases` says which parameters train in which epochs: a list of
  ``(epochs, parameters)`` pairs, ``parameters`` what trains for that many epochs — a
  :class:`~seq2final.models.ParameterChoice` evaluated on the model (``in_modules("fc")``,
  ``biases()``), parameter-name prefixes, or ``None`` for every parameter the fit trains — the
  last phase lasting to the end of the fit.

The phases run as a fit callback (:meth:`ModelWrapper.callback`): at the start of each epoch the
parameters outside the phase stop receiving gradients, so Adam leaves them (and its moments of
them) exactly as they were. A phase that would train nothing is refused in one line: before any
work, for a mode that declares its wrapper (``wrapper=`` at registration; the run's checks wrap a
model of the run's architecture and call :meth:`ModelWrapper.check`), and in any case when the fit
starts, before its first epoch.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from seq2final.core.errors import Seq2FinalError
from seq2final.models import ParameterChoice
from seq2final.training.callbacks import FitCallback, FitState

Phase = tuple[int | None, ParameterChoice | Sequence[str] | None]
"""How many epochs (``None``: until the fit ends) and which parameters train: a choice evaluated
on the model, parameter-name prefixes, or ``None`` (every parameter the fit trains)."""


def _renamed(old: str, new: str) -> None:
    warnings.warn(
        f"ModelWrapper.{old} is now {new}, the engine's and the fit state's name for it (the old "
        "name stops working in a later release)",
        DeprecationWarning,
        stacklevel=3,
    )


class ModelWrapper:
    """Subclass and override :meth:`wrap` and/or :meth:`phases`.

    ``freeze_bn_stats``: in a phase that trains some of the parameters only, the BatchNorm
    layers it leaves frozen run in eval mode (their running statistics normalise, and stay as
    they are), so such a phase changes nothing of them; by default they move with the batches,
    as the original's frozen layers' did. :meth:`configured` gives the wrapper a mode's YAML
    block asks for, which the run's checks check against the budget's epochs.
    """

    freeze_bn_stats: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "fixed_statistics" in cls.__dict__:  # its name in 0.1.0
            warnings.warn(
                f"{cls.__name__}.fixed_statistics is now freeze_bn_stats, the engine's and the "
                "fit state's name for it (the old name stops being read in a later release)",
                DeprecationWarning,
                stacklevel=2,
            )
            cls.freeze_bn_stats = cls.__dict__["fixed_statistics"]
            del cls.fixed_statistics  # the forwarding property below serves it from now on

    @property
    def fixed_statistics(self) -> bool:
        """Its name in 0.1.0: :attr:`freeze_bn_stats`."""
        _renamed("fixed_statistics", "freeze_bn_stats")
        return self.freeze_bn_stats

    @fixed_statistics.setter
    def fixed_statistics(self, value: bool) -> None:
        _renamed("fixed_statistics", "freeze_bn_stats")
        self.freeze_bn_stats = value

    def wrap(self, model: nn.Module) -> nn.Module:
        """The model the fit trains, made from ``model`` (the same one by default)."""
        return model

    def phases(self) -> list[Phase]:
        """The fit's phases, in order; one phase of every parameter by default."""
        return [(None, None)]

    def callback(self) -> FitCallback:
        """The fit callback that runs :meth:`phases` (put it on the fit's task)."""
        return _Phases(self.phases(), type(self).__name__, self.freeze_bn_stats)

    def configured(self, config: Mapping[str, Any]) -> ModelWrapper:
        """The wrapper a mode's YAML block ``config`` asks for (the run's checks check that one);
        this one by default, for a wrapper without settings."""
        return self

    def check(self, model: nn.Module, max_epochs: int | None = None) -> None:
        """Refuse, in one line, a phase that would train none of ``model``'s trainable parameters
        (``model`` as :meth:`wrap` made it), and one that a fit of ``max_epochs`` epochs would
        never reach."""
        names = [name for name, p in model.named_parameters() if p.requires_grad]
        phases = self.phases()
        _Phases(phases, type(self).__name__).check(model, names)
        before = 0
        for index, (epochs, _) in enumerate(phases):
            if max_epochs is not None and before >= max_epochs:
                raise Seq2FinalError(
                    f"model wrapper {type(self).__name__}: phase {index + 1} would never run, "
                    f"the phases before it taking {before} of the budget's {max_epochs} epochs; "
                    f"valid: phases before the last shorter than {max_epochs} epochs in all"
                )
            before += epochs or 0


class _Phases(FitCallback):
    """Before each epoch, only the current phase's parameters keep receiving gradients."""

    def __init__(self, phases: list[Phase], owner: str, freeze_bn_stats: bool = False) -> None:
        for index, (epochs, _) in enumerate(phases):
            if epochs is not None and (not isinstance(epochs, int) or epochs < 1):
                raise Seq2FinalError(
                    f"model wrapper {owner}: phase {index + 1} lasts {epochs!r} epochs; valid: a "
                    "whole number >= 1, or None for the rest of the fit"
                )
        self.phases, self.owner, self.freeze_bn_stats = phases, owner, freeze_bn_stats

    def before_fit(self, fit_state: FitState) -> None:
        trained = {id(p) for p in fit_state.parameters}
        model = fit_state.model
        self.check(model, [n for n, p in model.named_parameters() if id(p) in trained])

    def check(self, model: nn.Module, names: list[str]) -> None:
        """Every phase trains some of ``names`` (the parameters of ``model`` the fit trains);
        each phase's choice is evaluated on ``model`` once, here."""
        self.names = names
        self.chosen = [self._chosen(model, choice) for _, choice in self.phases]
        for index, ((_, choice), chosen) in enumerate(zip(self.phases, self.chosen, strict=True)):
            if not chosen:
                if isinstance(choice, ParameterChoice):
                    said, valid = f"choice '{choice.description}'", "a choice matching names"
                else:
                    said, valid = f"prefixes {list(choice or [])}", "prefixes start names"
                raise Seq2FinalError(
                    f"model wrapper {self.owner}: phase {index + 1} trains no parameter ({said}); "
                    f"valid {valid} such as {', '.join(self.names[:4])}"
                )

    def _chosen(self, model: nn.Module, choice: ParameterChoice | Sequence[str] | None) -> set[str]:
        if choice is None:
            return set(self.names)
        if isinstance(choice, ParameterChoice):
            return set(choice.chosen(model)) & set(self.names)
        return {n for n in self.names if any(n.startswith(p) for p in choice)}

    def before_epoch(self, fit_state: FitState) -> None:
        start, phase = 1, len(self.phases) - 1
        for index, (epochs, _) in enumerate(self.phases):
            if epochs is None or fit_state.epoch < start + epochs:
                phase = index
                break
            start += epochs
        trained = self.chosen[phase]
        fit_state.freeze_bn_stats = self.freeze_bn_stats and self.phases[phase][1] is not None
        for name, parameter in fit_state.model.named_parameters():
            if name in self.names:
                parameter.requires_grad_(name in trained)
                if name not in trained:
                    parameter.grad = None
