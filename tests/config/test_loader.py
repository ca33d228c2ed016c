"""The configuration loader's cache: one parse per content, and never a stale answer."""

import shutil

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
    parse = loader.OmegaConfigLoader.__getitem__

    def counted(self, key):
        seen.append(key)
        return parse(self, key)

    monkeypatch.setattr(loader.OmegaConfigLoader, "__getitem__", counted)
    return seen


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
