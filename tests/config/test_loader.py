"""The configuration loader's cache: one parse per content, and never a stale answer."""

import shutil
from pathlib import Path

import pytest
from kedro.config import MissingConfigException
from omegaconf import OmegaConf

from seq2final.config import loader
from seq2final.config.loader import CachedConfigLoader


@pytest.fixture
def parses(monkeypatch):
    """The keys the loader really parsed (cache misses), with an empty cache."""
    monkeypatch.setattr(loader, "_CACHE", type(loader._CACHE)())
    seen = []
    _spy(monkeypatch, loader.OmegaConfigLoader, "__getitem__", lambda self, key: seen.append(key))
    return seen


def _spy(monkeypatch, owner, name, record):
    """``owner.name`` calling ``record`` with its arguments before it runs."""
    real = getattr(owner, name)

    def spied(*args):
        record(*args)
        return real(*args)

    monkeypatch.setattr(owner, name, spied)


def _conf(root, parameters="lr: 0.1\nnested: {a: 1}\n", local="", globals_=""):
    for env, text in (("base", parameters), ("local", local)):
        (root / env).mkdir(parents=True, exist_ok=True)
        if text:
            (root / env / "parameters.yml").write_text(text)
    if globals_:
        (root / "base" / "globals.yml").write_text(globals_)
    return root


def _loader(root, **kwargs):
    return CachedConfigLoader(str(root), base_env="base", default_run_env="local", **kwargs)


def test_the_same_files_elsewhere_are_parsed_once(tmp_path, parses):
    one, two = _conf(tmp_path / "one"), _conf(tmp_path / "two")
    assert _loader(one)["parameters"] == {"lr": 0.1, "nested": {"a": 1}}
    assert _loader(two)["parameters"] == {"lr": 0.1, "nested": {"a": 1}}
    assert parses.count("parameters") == 1


def test_a_changed_file_parameter_or_global_is_read_again(tmp_path, parses):
    conf = _conf(tmp_path, parameters="lr: ${globals:rate}\n", globals_="rate: 0.1\n")
    assert _loader(conf)["parameters"] == {"lr": 0.1}
    (conf / "base" / "globals.yml").write_text("rate: 0.2\n")
    assert _loader(conf)["parameters"] == {"lr": 0.2}
    (conf / "local" / "parameters.yml").write_text("extra: 1\n")
    assert _loader(conf)["parameters"] == {"lr": 0.2, "extra": 1}
    assert _loader(conf, runtime_params={"lr": 0.5})["parameters"] == {"lr": 0.5, "extra": 1}
    (conf / "other").mkdir()
    assert _loader(conf, env="other")["parameters"] == {"lr": 0.2}  # another environment
    assert parses.count("parameters") == 5


def test_what_a_caller_changes_is_not_what_the_next_one_gets(tmp_path, parses):
    conf = _conf(tmp_path)
    _loader(conf)["parameters"]["nested"]["a"] = 99
    assert _loader(conf)["parameters"]["nested"] == {"a": 1}
    assert parses.count("parameters") == 1


def test_credentials_are_always_read_afresh(tmp_path, parses):
    conf = _conf(tmp_path)
    (conf / "local" / "credentials.yml").write_text("db: {user: me}\n")
    for _ in range(2):
        assert _loader(conf)["credentials"] == {"db": {"user": "me"}}
    assert parses.count("credentials") == 2


def test_globals_given_to_a_loader_are_read_as_it_holds_them(tmp_path, parses):
    conf = _conf(tmp_path, parameters="lr: ${globals:rate}\n", globals_="rate: 1\n")
    assert _loader(conf)["parameters"] == {"lr": 1}
    other = _loader(conf)
    other["globals"] = {"rate": 2}
    assert other["parameters"] == {"lr": 2}


def test_the_runtime_parameters_type_guard_is_never_skipped(tmp_path, parses):
    conf = _conf(tmp_path)
    (conf / "base" / "catalog.yml").write_text('ds: {type: "${runtime_params:t}", filepath: x}\n')
    params = {"t": "pickle.PickleDataset"}
    assert _loader(conf, runtime_params=params)["catalog"]["ds"]["type"] == "pickle.PickleDataset"
    guarded = _loader(conf, runtime_params=params, restrict_runtime_params_type_selection=True)
    with pytest.raises(Exception, match="runtime_params"):
        guarded["catalog"]


def test_a_missing_environment_folder_is_still_refused(tmp_path, parses):
    whole, partial = _conf(tmp_path / "whole"), _conf(tmp_path / "partial")
    shutil.rmtree(partial / "local")
    assert _loader(whole)["parameters"]
    with pytest.raises(MissingConfigException):
        _loader(partial)["parameters"]


def test_nothing_is_cached_while_a_resolver_of_unknown_purity_is_registered(tmp_path, parses):
    conf = _conf(tmp_path, parameters="lr: ${draw:}\n")
    draws = iter(range(10))
    OmegaConf.register_new_resolver("draw", lambda: next(draws))
    try:
        assert [_loader(conf)["parameters"]["lr"] for _ in range(2)] == [0, 1]
    finally:
        OmegaConf.clear_resolver("draw")


def _kedro(root, **kwargs):
    """Kedro's own loader, as the cache must answer."""
    return loader.OmegaConfigLoader(str(root), base_env="base", default_run_env="local", **kwargs)


@pytest.fixture
def reads(monkeypatch):
    """How often the cached loader parsed files (Kedro's ``_read_raw_config``), with an empty
    cache."""
    monkeypatch.setattr(loader, "_CACHE", type(loader._CACHE)())
    seen = []

    def record(self, key):
        if isinstance(self, CachedConfigLoader):
            seen.append(key)

    _spy(monkeypatch, loader.OmegaConfigLoader, "_read_raw_config", record)
    return seen


RUNTIME = [
    {"lr": 0.5},
    {"nested": {"b": [1, {"c": None}]}, "new": {"deep": {"er": True}}},
    {"nested": 3, "lr": {"now": "a mapping"}},  # a scalar over a mapping, a mapping over one
    {"nested": {"a": None}, "listed": [4]},  # a list replaced whole
    {"kept": {"x": 2}},  # the run environment replaced the base's mapping with a scalar
]


@pytest.mark.parametrize("strategy", ["soft", "destructive"])
def test_runtime_parameters_are_merged_as_kedro_merges_them_from_one_parse(
    tmp_path, reads, strategy
):
    conf = _conf(tmp_path, parameters="lr: 0.1\nnested: {a: 1, b: [0]}\nlisted: [1, 2]\n"
                 "kept: {x: 1, y: 1}\n", local="nested: {c: 2}\nkept: 5\nlocal_only: 1\n")  # fmt: skip
    merge = {"parameters": strategy}
    for runtime in RUNTIME:
        expected = _kedro(conf, runtime_params=runtime, merge_strategy=merge)["parameters"]
        got = _loader(conf, runtime_params=runtime, merge_strategy=merge)["parameters"]
        assert got == expected, runtime
        got["nested"] = "changed by a caller"
        assert _loader(conf, runtime_params=runtime, merge_strategy=merge)["parameters"] == expected
    assert reads.count("parameters") == 1  # every set of runtime parameters from one parse


def test_the_projects_own_parameters_are_kedros_under_any_runtime_parameters(reads):
    conf = Path(loader.__file__).resolve().parents[3] / "conf"
    merge = {"parameters": "soft"}
    project = {"method": ["ft", "lp"], "budgets": {"smoke": {"trials": 9}},
               "build_sequences": {"test_size": 50}, "mlflow": {"enabled": False}}  # fmt: skip
    for env in ("test", "paper"):
        for runtime in (project, RUNTIME[2]):
            kwargs = {"env": env, "runtime_params": runtime, "merge_strategy": merge}
            assert _loader(conf, **kwargs)["parameters"] == _kedro(conf, **kwargs)["parameters"]
    assert reads.count("parameters") == 2  # one parse per environment


@pytest.fixture
def merges(monkeypatch):
    """How often the loader merged runtime parameters itself instead of leaving it to Kedro."""
    seen = []
    _spy(monkeypatch, loader, "_merge", lambda into, extra: seen.append(extra))
    return seen


@pytest.mark.parametrize(
    "runtime",
    [{"lr": "${nested.a}"}, {"nested": {"a": "???"}}, {"listed": (7, 8)}, {1: "integer key"}],
    ids=["interpolation", "missing", "tuple", "integer key"],
)
def test_what_omegaconf_would_merge_otherwise_is_left_to_kedro(tmp_path, reads, merges, runtime):
    conf = _conf(tmp_path, parameters="lr: 0.1\nnested: {a: 1}\nlisted: [1]\n")
    expected = _kedro(conf, runtime_params=runtime)["parameters"]
    assert _loader(conf, runtime_params=runtime)["parameters"] == expected
    assert merges == []


@pytest.mark.parametrize(
    "parameters",
    ['a: 1\nb: "\\u0024{a}"\n', 'a: 1\nb: "$\\\n  {a}"\n', "a: 1\nb: ${a}\n"],
    ids=["unicode escape", "escaped line break", "plain"],
)
def test_a_file_that_may_spell_an_interpolation_is_left_to_kedro(tmp_path, merges, parameters):
    conf = _conf(tmp_path, parameters=parameters)
    expected = _kedro(conf, runtime_params={"a": 2})["parameters"]
    assert expected["b"] == 2  # interpolated after the runtime parameters are merged
    assert _loader(conf, runtime_params={"a": 2})["parameters"] == expected
    assert merges == []


@pytest.mark.parametrize("strategy", ["soft", "destructive"])
@pytest.mark.parametrize("without_files", ["base", "local"])
def test_an_environment_without_parameter_files_is_merged_as_kedro_merges_it(
    tmp_path, merges, strategy, without_files
):
    """Kedro merges the runtime parameters only into an environment that has files."""
    text = "model: {lr: 1, layers: 2}\nx: 1\ny: 2\n"
    conf = _conf(tmp_path, **{"parameters" if without_files == "local" else "local": text})
    if without_files == "base":
        (conf / "base" / "parameters.yml").unlink(missing_ok=True)
    runtime = {"model": {"lr": 5}, "y": 3, "z": 4}
    kwargs = {"runtime_params": runtime, "merge_strategy": {"parameters": strategy}}
    expected = _kedro(conf, **kwargs)["parameters"]
    got = _loader(conf, **kwargs)["parameters"]
    assert got == expected and list(got) == list(expected)  # the keys in Kedro's order too
    assert merges


def test_a_mapping_over_a_list_is_kedros_error(tmp_path, reads):
    conf = _conf(tmp_path, parameters="listed: [1]\n")
    with pytest.raises(Exception, match="incompatible") as kedros:
        _kedro(conf, runtime_params={"listed": {"a": 1}})["parameters"]
    with pytest.raises(kedros.type, match="incompatible"):
        _loader(conf, runtime_params={"listed": {"a": 1}})["parameters"]


def test_a_catalog_that_reads_no_runtime_parameter_is_resolved_once_for_any(tmp_path, parses):
    conf = _conf(tmp_path)
    (conf / "base" / "catalog.yml").write_text("_p: data\nds: {type: a.B, filepath: '${_p}/x'}\n")
    for seed in range(3):
        assert _loader(conf, runtime_params={"seed": seed})["catalog"] == {
            "ds": {"type": "a.B", "filepath": "data/x"}
        }
    assert parses.count("catalog") == 1
    (conf / "local" / "catalog.yml").write_text("other: {type: '${runtime_params:t, a.C}'}\n")
    for t in ("a.D", "a.E"):  # one that does is resolved for each
        assert _loader(conf, runtime_params={"t": t})["catalog"]["other"] == {"type": t}
    assert parses.count("catalog") == 3
