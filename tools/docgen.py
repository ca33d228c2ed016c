"""The docs site's reference page, generated from the registries and parameter models.

``docs/reference.md`` is this script's output (``python tools/docgen.py > docs/reference.md``,
or ``make reference``), and a test fails when they differ, so the page lists exactly what a
registry holds: adding a method, shift, architecture or dataset updates it by regeneration.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel

from seq2final.config.parameters import RunParameters
from seq2final.data.presets import PRESETS
from seq2final.data.shifts import SHIFTS, Dial
from seq2final.data.sources import SOURCES
from seq2final.methods import FINAL_MODES, HISTORICAL_MODES, METHODS, MethodRecipe
from seq2final.models import ARCHITECTURES, build_model, count_parameters, forward_macs
from seq2final.training.hyperparameters import FitHyperParameters, default_space
from seq2final.training.optimizers import OPTIMIZERS
from seq2final.training.terms import LOSS_TERMS, AnchorPull, is_objective


def _first_line(obj: Any) -> str:
    return ((getattr(obj, "__doc__", None) or "").strip().splitlines() or [""])[0]


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def yaml_comments(conf: Path) -> dict[str, str]:
    """Each parameter's comment in ``conf/parameters*.yml``, by dotted name: the text after ``#``
    on its line, or else the comment line just above it."""
    comments: dict[str, str] = {}
    for path in sorted(conf.glob("parameters*.yml")):
        stack: list[tuple[int, str]] = []
        above = ""
        for line in path.read_text().splitlines():
            text = line.strip()
            if text.startswith("#"):
                above = f"{above} {text.lstrip('# ')}".strip()
                continue
            key, colon, rest = text.partition(":")
            if not colon or not key or key.startswith("-"):
                above = ""
                continue
            indent = len(line) - len(line.lstrip())
            stack = [(i, k) for i, k in stack if i < indent] + [(indent, key.strip('"'))]
            comment = rest.partition(" #")[2].strip() or above
            if comment:
                comments[".".join(k for _, k in stack)] = comment
            above = ""
    return comments


def _type_name(annotation: Any) -> str:
    """A type as users read it: ``str | None``, ``list[str]`` (validators left out)."""
    if annotation is type(None):
        return "None"
    if get_origin(annotation) is Annotated:
        return _type_name(get_args(annotation)[0])
    if isinstance(annotation, type) and not get_args(annotation):
        return annotation.__name__
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, UnionType):
        return " | ".join(_type_name(arg) for arg in args)
    if origin is Literal:
        return " | ".join(repr(arg) for arg in args)
    if origin is not None:
        return f"{getattr(origin, '__name__', origin)}[{', '.join(map(_type_name, args))}]"
    return str(annotation).replace("typing.", "")


def _parameters(
    model: type[BaseModel], comments: dict[str, str], prefix: str = ""
) -> list[list[Any]]:
    rows = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            what = _first_line(annotation).replace(":class:", "")
            rows.append([f"`{prefix}{name}`", "block", "", what])
            rows += _parameters(annotation, comments, f"{prefix}{name}.")
            continue
        default = field.get_default(call_default_factory=True)
        kind = _type_name(annotation)
        what = comments.get(f"{prefix}{name}", "")
        rows.append([f"`{prefix}{name}`", f"`{kind}`", f"`{default!r}`", what])
    return rows


def _space(block: dict[str, Any] | None) -> str:
    if not block:
        return "–"
    space = block.get("space") or block.get("head_space") or {}
    return ", ".join(
        f"{name} {values.get('grid')}" for name, values in space.items() if isinstance(values, dict)
    )


def _final_grid(recipe: MethodRecipe, historicals: dict[str, Any], finals: dict[str, Any]) -> str:
    """The grid a method's final fit searches: a chain pulled towards its anchors (EWC, SI)
    continues in its own space, whose λ weights the pull; an SFT chain in its own space with the
    schedule's learning rate at step T; every other method in its final mode's."""
    chain = historicals.get(recipe.historical) or {}
    pulls = [
        t
        for t in HISTORICAL_MODES[recipe.historical].terms
        if issubclass(LOSS_TERMS[t], AnchorPull)
    ]
    if pulls:
        return f"{_space(chain)} (the chain's own)"
    if chain.get("schedules"):
        return f"{_space(chain)} (the chain's own; each schedule but `none` fixes lr at step T)"
    return _space(finals.get(recipe.final))


def _summary(doc: str | None) -> str:
    """A docstring's first paragraph on one line, Sphinx roles dropped."""
    first = " ".join((doc or "").split("\n\n")[0].split())
    return re.sub(r":\w+:`", "`", first)


def _hyperparameters(schema: type[BaseModel]) -> str:
    """A schema's hyper-parameters: default, range and default search-space entry of each."""
    spaces = default_space(schema)
    described = []
    for name, field in schema.model_fields.items():
        bounds = [
            f"{symbol} {getattr(rule, attr)}"
            for rule in field.metadata
            for attr, symbol in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"))
            if hasattr(rule, attr)
        ]
        default = "required" if field.is_required() else field.default
        text = f"`{name}` = {default}" + (f" ({', '.join(bounds)})" if bounds else "")
        if name in spaces:
            text += f"; space `{json.dumps(spaces[name])}`"
        described.append(text)
    return "<br>".join(described) or "–"


def _dial(dial: Dial | None) -> str:
    if dial is None:
        return "none"
    whole = ", whole" if dial.integer else ""
    return f"{dial.unit}: {dial.default:g} ({dial.low:g} to {dial.high:g}{whole})"


def render(conf: Path) -> str:
    """The whole page, from the registries and the YAML under ``conf`` (``conf/base``)."""
    finals = yaml.safe_load((conf / "parameters_adapt_final.yml").read_text())["final_modes"]
    historicals = yaml.safe_load((conf / "parameters_pretrain_historical.yml").read_text())[
        "historical_modes"
    ]
    parts = [
        *_parameter_sections(conf),
        *_data_sections(),
        *_architecture_sections(),
        *_method_sections(historicals, finals),
        *_training_sections(),
    ]
    return "\n".join(parts)


def _parameter_sections(conf: Path) -> list[str]:
    """The page's head and every run parameter, with its YAML comment."""
    return [
        "# Reference\n\nGenerated by `python tools/docgen.py > docs/reference.md` from the "
        "registries and parameter models; a test keeps it current.\n",
        "## Run parameters\n\nEvery parameter `kedro run --params` accepts, with its default. "
        "Blocks are addressed with dots (`--params training.input_scale=raw`). The YAML files in "
        "`conf/base/` carry a comment on each.\n",
        _table(
            ["parameter", "type", "default", "what"],
            _parameters(RunParameters, yaml_comments(conf)),
        ),
    ]


def _data_sections() -> list[str]:
    """Sources, shift blocks and sequence presets."""
    return [
        "## Sources (`seq2final.data.sources.SOURCES`)\n",
        _table(["name", "what"], [[f"`{n}`", s.description] for n, s in SOURCES.items()]),
        "## Shift blocks (`seq2final.data.shifts.SHIFTS`)\n\nAn intensity follows `@` "
        "(`rotation@15`); without one a block makes its default step ([Intensity](intensity.md)).\n",
        _table(
            ["name", "effect", "what one application does", "intensity: default (valid)"],
            [[f"`{n}`", b.effect, b.description, _dial(b.dial)] for n, b in SHIFTS.items()],
        ),  # fmt: skip
        "## Sequence presets (`seq2final.data.presets.PRESETS`)\n",
        _table(
            ["name", "dataset", "spec", "what"],
            [[f"`{n}`", p.dataset, f"`{p.spec}`", p.description] for n, p in PRESETS.items()],
        ),  # fmt: skip
    ]


def _architecture_sections() -> list[str]:
    """The architectures, their parameters and MACs."""
    return [
        "## Architectures (`seq2final.models.ARCHITECTURES`)\n\nParameters in the paper's "
        "convention (Table 7) and multiply-accumulates of one 32×32 forward pass, 10 classes.\n",
        _table(
            ["name", "family", "side modules", "parameters", "MACs"],
            [
                [
                    f"`{n}`",
                    ARCHITECTURES[n].family,
                    ", ".join(ARCHITECTURES[n].side_modules),
                    f"{count_parameters(build_model(n, 10), 'paper'):,}",
                    f"{forward_macs(build_model(n, 10)):,}",
                ]
                for n in ARCHITECTURES
            ],
        ),  # fmt: skip
    ]


def _method_sections(historicals: dict[str, Any], finals: dict[str, Any]) -> list[str]:
    """Methods with their final search grids, then the two kinds of modes."""
    return [
        "## Methods (`seq2final.methods.METHODS`)\n\nEach method is a historical mode plus a final "
        "mode (paper Table 1 class; 0 = reference). Search spaces are the `paper` budget's grids "
        "(`conf/base/parameters_adapt_final.yml`).\n",
        _table(
            ["name", "paper", "class", "historical", "final", "final search grid", "source"],
            [
                [
                    f"`{n}`",
                    m.paper_name,
                    m.paper_class,
                    f"`{m.historical}`",
                    f"`{m.final}`",
                    _final_grid(m, historicals, finals),
                    m.citation or "–",
                ]
                for n, m in METHODS.items()
            ],
        ),  # fmt: skip
        "### Historical modes\n",
        _table(
            ["name", "leaves", "what"],
            [[f"`{n}`", m.leaves, m.description] for n, m in HISTORICAL_MODES.items()],
        ),  # fmt: skip
        "### Final modes\n",
        _table(
            ["name", "continues from", "what"],
            [
                [f"`{n}`", ", ".join(m.continues_from), m.description]
                for n, m in FINAL_MODES.items()
            ],
        ),  # fmt: skip
    ]


def _training_sections() -> list[str]:
    """What a fit's loss is made of, and the optimisers."""
    return [
        "## Loss terms (`seq2final.training.LOSS_TERMS`)\n\nWhat a fit's loss is made of "
        "(`docs/extending.md`, Methods of any kind): objectives combine the domains' losses, "
        "penalties add to them; `l2` is in every fit. Each hyper-parameter with its default, its "
        "valid range and its default search-space entry, which a mode no YAML block names "
        "searches.\n",
        _table(
            ["name", "kind", "hyper-parameters", "what"],
            [
                [
                    "–",
                    "the fit's own",
                    _hyperparameters(FitHyperParameters),
                    _summary(FitHyperParameters.__doc__),
                ],
                *(
                    [
                        f"`{n}`",
                        "objective" if is_objective(t) else "penalty",
                        _hyperparameters(t.hyperparameters),
                        _summary(t.__doc__),
                    ]
                    for n, t in LOSS_TERMS.items()
                ),
            ],
        ),  # fmt: skip
        "## Optimisers (`seq2final.training.OPTIMIZERS`)\n\nHow a fit updates its weights "
        "(`docs/extending.md`, Methods of any kind); a task names one, `adam` by default.\n",
        _table(
            ["name", "step closure", "hyper-parameters", "what"],
            [
                [
                    f"`{n}`",
                    "yes" if r.takes_closure else "no",
                    _hyperparameters(r.hyperparameters),
                    _summary(r.__doc__),
                ]
                for n, r in OPTIMIZERS.items()
            ],
        ),  # fmt: skip
    ]


if __name__ == "__main__":
    sys.stdout.write(render(Path("conf/base")))
