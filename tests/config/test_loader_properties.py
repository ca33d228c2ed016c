"""The cached loader is Kedro's ``OmegaConfigLoader``, proven over generated configurations.

Hypothesis draws a base and a local environment's parameter files (nested mappings of numbers,
strings, booleans, nulls and lists, two files per environment, key collisions on purpose), a
merge strategy, and runtime parameters (dotted into nested mappings, as ``--params`` gives them),
and the cached loader must answer what ``OmegaConfigLoader`` answers for the same folder, first
from an empty cache and then from a warm one with other runtime parameters. What a Kedro upgrade
must re-check is in docs/architecture.md ("Start-up"): these tests, run against the new Kedro.
"""

import shutil
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kedro.config import OmegaConfigLoader

from seq2final.config import loader
from seq2final.config.loader import CachedConfigLoader

KEYS = st.sampled_from(["lr", "arch", "seed", "training", "space", "grid", "mlflow", "a", "b"])
LEAVES = (
    st.integers(-5, 5)
    | st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)
    | st.sampled_from(["adam", "x", "", "1e-3", "yes"])
    | st.booleans()
    | st.none()
)
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=8,
)
FILES = st.dictionaries(KEYS, VALUES, max_size=4)
RUNTIME = st.dictionaries(KEYS, VALUES, max_size=3)


def _write(conf: Path, base: list[dict], local: list[dict]) -> None:
    """Two parameter files per environment (Kedro refuses a key two files of one environment
    both hold at the top level, and so must the cached loader)."""
    for env, files in (("base", base), ("local", local)):
        (conf / env).mkdir(parents=True, exist_ok=True)
        for index, content in enumerate(files):
            if content:
                text = yaml.safe_dump(content, sort_keys=False)
                (conf / env / f"parameters_{index}.yml").write_text(text)


def _answer(make, conf: Path, strategy: str | None, runtime: dict) -> tuple[str, object]:
    """What a loader gives for the parameters, or the kind of error it raises."""
    merge = {"parameters": strategy} if strategy else None
    try:
        config = make(str(conf), base_env="base", default_run_env="local",
                      merge_strategy=merge, runtime_params=runtime)  # fmt: skip
        return "value", config["parameters"]
    except Exception as error:  # noqa: BLE001 - the same failure is the same answer
        return "error", type(error).__name__


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=st.lists(FILES, min_size=1, max_size=2),
    local=st.lists(FILES, max_size=2),
    strategy=st.sampled_from([None, "soft", "destructive"]),
    runtime=st.lists(RUNTIME, min_size=1, max_size=3),
)
def test_the_cached_loader_answers_what_omegaconfs_loader_answers(base, local, strategy, runtime):
    folder = Path(tempfile.mkdtemp())
    saved = loader._CACHE.copy()
    loader._CACHE.clear()  # cold first, then warm with each further set of runtime parameters
    try:
        _write(folder / "conf", base, local)
        for params in runtime:
            expected = _answer(OmegaConfigLoader, folder / "conf", strategy, params)
            assert _answer(CachedConfigLoader, folder / "conf", strategy, params) == expected
    finally:
        loader._CACHE.clear()
        loader._CACHE.update(saved)
        shutil.rmtree(folder)


@settings(max_examples=60, deadline=None)
@given(base=FILES, dotted=st.lists(st.tuples(st.lists(KEYS, min_size=1, max_size=3), LEAVES),
                                   min_size=1, max_size=4))  # fmt: skip
def test_dotted_runtime_parameters_merge_as_kedro_merges_them(base, dotted):
    """``--params training.lr=0.1`` arrives as nested mappings, each merged into the files'."""
    runtime: dict = {}
    for path, value in dotted:
        node = runtime
        for key in path[:-1]:
            child = node.get(key)
            node[key] = child if isinstance(child, dict) else {}
            node = node[key]
        node[path[-1]] = value
    folder = Path(tempfile.mkdtemp())
    try:
        _write(folder / "conf", [base], [])
        expected = _answer(OmegaConfigLoader, folder / "conf", "soft", runtime)
        assert _answer(CachedConfigLoader, folder / "conf", "soft", runtime) == expected
        assert _answer(CachedConfigLoader, folder / "conf", "soft", runtime) == expected  # warm
    finally:
        shutil.rmtree(folder)
