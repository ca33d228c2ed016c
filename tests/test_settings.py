"""What the project's settings do for every Kedro session."""

import importlib.util
import sys

from kedro.framework.session import KedroSession

from seq2final.core.startup import bootstrap_once


class AskedFor:
    """A meta-path finder that only notes the modules Python looks for."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def find_spec(self, name, path=None, target=None):  # noqa: ANN001, ANN201
        self.names.append(name)
        return None


def test_a_sessions_parameters_look_for_no_missing_module(project):
    """Kedro's MemoryDataset imports ibis for each parameter it holds; absent, that was a search
    along the whole path per parameter (src/seq2final/settings.py)."""
    bootstrap_once(project)
    with KedroSession.create(project_path=project, env="test") as session:
        context = session.load_context()
        asked = AskedFor()
        sys.meta_path.insert(0, asked)
        try:
            catalog = context.catalog
        finally:
            sys.meta_path.remove(asked)
    assert len([name for name in catalog if name.startswith("params:")]) > 100
    if importlib.util.find_spec("ibis") is None:  # as here; with ibis installed it is found once
        assert "ibis" not in asked.names
