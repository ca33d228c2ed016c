"""How many times one run builds each part of its plan: the sequence spec, the job list, the
budget, the ``Engine`` and the search spaces (the measure of a typed plan built once).

Runs the default pipeline with ``method:st_b`` (or ``--params``) in a copy of the project under a
temporary folder, with each builder wrapped by a counter wherever the package imported it, and
prints the counts; also how many times the run is planned (``plan_run``). A search space is counted at every parse, the up-front check of every
registered mode's YAML block included; an ``Engine`` at every constructor call (validating a
whole ``RunParameters`` builds one without that call, and is not counted).

    .venv/bin/python benchmarks/plan_builds.py [--method st_b] [--budget smoke]
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kedro.framework.session import KedroSession

import seq2final.settings  # noqa: F401  (imports every module a run uses, so all are wrapped)
from seq2final.core.startup import bootstrap_once
from seq2final.data import spec as spec_module
from seq2final.methods import requests as request_module
from seq2final.runs import planner as planner_module
from seq2final.training import search as search_module
from seq2final.training.engine import Engine

PROJECT = Path(__file__).resolve().parents[1]
COUNTS: collections.Counter[str] = collections.Counter()


def counted(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        COUNTS[name] += 1
        return original(*args, **kwargs)

    return wrapper


def wrap_everywhere(name: str, original: Callable[..., Any]) -> None:
    """Replace ``original`` by a counter in every seq2final module that holds it."""
    wrapper = counted(name, original)
    for module in [m for n, m in list(sys.modules.items()) if n.startswith("seq2final")]:
        for attribute, value in list(vars(module).items()):
            if value is original:
                setattr(module, attribute, wrapper)


def instrument() -> None:
    wrap_everywhere("sequence spec resolved (resolve_spec)", spec_module.resolve_spec)
    wrap_everywhere("job list expanded (requested_jobs)", request_module.requested_jobs)
    wrap_everywhere("budget parsed (get_budget)", search_module.get_budget)
    wrap_everywhere("run planned (plan_run)", planner_module.plan_run)
    parse = search_module.SearchSpace.parse.__func__  # type: ignore[attr-defined]
    search_module.SearchSpace.parse = classmethod(  # type: ignore[method-assign,assignment]
        counted("search space parsed (SearchSpace.parse)", parse)
    )
    engine_init = Engine.__init__

    def built(self: Engine, *args: Any, **kwargs: Any) -> None:
        COUNTS["Engine built"] += 1
        engine_init(self, *args, **kwargs)

    Engine.__init__ = built  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", default="st_b")
    parser.add_argument("--budget", default="smoke")
    args = parser.parse_args()
    instrument()
    with tempfile.TemporaryDirectory() as folder:
        project = Path(folder)
        shutil.copytree(PROJECT / "conf", project / "conf", ignore=shutil.ignore_patterns("local"))
        (project / "conf" / "local").mkdir()
        shutil.copy(PROJECT / "pyproject.toml", project)
        for name in ("data", "logs", "src"):
            (project / name).mkdir()
        os.chdir(project)
        bootstrap_once(project)
        runtime = {"method": args.method, "budget": args.budget}
        with KedroSession.create(project_path=project, runtime_params=runtime) as session:
            session.run()
    for name, count in sorted(COUNTS.items()):
        sys.stdout.write(f"{count:4d}  {name}\n")


if __name__ == "__main__":
    main()
