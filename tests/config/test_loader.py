"""The configuration loader's cache: one parse per content, and never a stale answer."""

import pytest

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
