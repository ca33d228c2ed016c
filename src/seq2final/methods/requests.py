"""Which jobs a run asks for: methods and mode pairs resolved, checked and named.

A user names a method (``method:ft``), a pair of modes (``historical:irm,final:lp_ft``) or
nothing (every registered method). :func:`requested_jobs` turns that into the jobs actually
trained, each named once: the pipelines, the tracker and the checks before work all call it.
"""

from __future__ import annotations

from dataclasses import dataclass

from seq2final.core.errors import Seq2FinalError
from seq2final.methods.modes import (
    FINAL_MODES,
    HISTORICAL_MODES,
    METHODS,
    FinalMode,
    HistoricalMode,
)
from seq2final.models import ARCHITECTURES


def _fits(h: HistoricalMode, f: FinalMode) -> bool:
    if h.leaves not in f.continues_from:
        return False
    return h.leaves != "side_chain" or h.side_module == f.side_module


def check_combination(historical: str, final: str) -> None:
    """Refuse a historical × final pair whose final mode cannot continue what the first leaves."""
    h, f = HISTORICAL_MODES[historical], FINAL_MODES[final]
    valid = [name for name, mode in HISTORICAL_MODES.items() if _fits(mode, f)]
    if not _fits(h, f):
        if h.leaves == "nothing":
            reason = f"'{final}' continues from a trained historical model and '{historical}' trains none"
        elif f.continues_from == ("nothing",):
            reason = f"'{final}' trains on the steps itself and would ignore '{historical}''s state"
        elif h.leaves == "side_chain" and f.side_module is None:
            reason = f"'{historical}' leaves a side-tuned joint model, which '{final}' cannot fine-tune as one network"
        else:
            reason = f"'{historical}' adds {h.side_module} side modules and '{final}' adds {f.side_module} ones"
        raise Seq2FinalError(
            f"historical '{historical}' cannot precede final '{final}': {reason}; "
            f"valid historical modes for '{final}': {', '.join(valid)}"
        )


def resolve_request(
    method_name: str | list[str] | None, historical: str | None, final: str | None
) -> list[tuple[str, str, str]]:
    """(requested name, historical, final) for every job the run parameters ask for.

    No method and no modes: all registered methods; a list of methods: each of them, in order.
    A method with modes that disagree with its recipe is refused rather than guessed at.
    """
    if isinstance(method_name, list):
        resolved = [job for name in method_name for job in resolve_request(name, historical, final)]
        return list(dict.fromkeys(resolved))
    if method_name is not None:
        recipe = METHODS[method_name]
        for given, own, what in (
            (historical, recipe.historical, "historical"),
            (final, recipe.final, "final"),
        ):
            if given is not None and given != own:
                raise Seq2FinalError(
                    f"method '{method_name}' is historical '{recipe.historical}' + final "
                    f"'{recipe.final}', which contradicts {what} '{given}'; give the method or the modes"
                )
        check_combination(recipe.historical, recipe.final)
        return [(method_name, recipe.historical, recipe.final)]
    if historical is None and final is None:
        return [(name, r.historical, r.final) for name, r in METHODS.items()]
    if final is None:
        raise Seq2FinalError(
            f"historical '{historical}' needs a final mode too; valid: {', '.join(FINAL_MODES)}"
        )
    historical = historical or "none"
    check_combination(historical, final)
    return [(method_label(historical, final), historical, final)]


def canonical_modes(historical: str, final: str, arch: str) -> tuple[str, str]:
    """The modes actually trained on ``arch``: where the architecture has no side module of a
    mode's kind (a ConvNet block is one conv + BN, so 1-layer = block), its block equivalent."""
    kinds = ARCHITECTURES[arch].side_modules
    h, f = HISTORICAL_MODES[historical], FINAL_MODES[final]
    if h.side_module is not None and h.side_module not in kinds and h.block_equivalent:
        historical = h.block_equivalent
    if f.side_module is not None and f.side_module not in kinds and f.block_equivalent:
        final = f.block_equivalent
    return historical, final


def method_label(historical: str, final: str) -> str:
    """The method with these modes, or ``historical+final`` for a new combination."""
    for name, recipe in METHODS.items():
        if (recipe.historical, recipe.final) == (historical, final):
            return name
    return f"{historical}+{final}"


@dataclass(frozen=True)
class RequestedJob:
    """One job a run asks for: the name the user gave, the modes trained and the job's method."""

    requested: str
    historical: str
    final: str

    @property
    def method(self) -> str:
        return method_label(self.historical, self.final)


def requested_jobs(
    method_name: str | list[str] | None, historical: str | None, final: str | None, arch: str
) -> list[RequestedJob]:
    """Every job the run parameters ask for on ``arch``, with the modes it actually trains."""
    return [
        RequestedJob(name, *canonical_modes(h, f, arch))
        for name, h, f in resolve_request(method_name, historical, final)
    ]
