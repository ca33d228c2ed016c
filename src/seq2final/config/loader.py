"""Kedro's ``OmegaConfigLoader`` with a per-process cache of what it parses and merges.

Every Kedro session reads the project's configuration again: OmegaConf parses each YAML file
into nodes, merges them and resolves interpolations, tenths of a second of CPU for the
parameters and the catalog (``docs/architecture.md``, "Start-up"). A sweep's workers and a test
process open many sessions on the same files, so the result of each key is kept in memory,
addressed by everything Kedro's resolution reads: the key, the environments and whether their
folders exist, the bytes of every file the key's patterns match, the globals the loader holds,
the runtime parameters (for the parameters, and for a key whose files name the
``runtime_params`` resolver or hold a backslash: nothing else reads them), the merge strategy
and the runtime-parameter type guard. The cache is used only while every resolver registered in
the process is one whose answer depends on those alone (OmegaConf's own but ``oc.env``, Kedro's
``globals`` and ``runtime_params``), and never for credentials, which read environment
variables. A file changed while it is read is not cached.

Most sessions differ in their runtime parameters alone (a test's, a sweep task's, each
``kedro run --params``), and Kedro's parameters are its files merged with them: half a second of
CPU to parse and merge the project's files again for each new set. So the parameters of the base
and of the run environment are also kept as Kedro resolves them without runtime parameters, and
each new set is merged into both as OmegaConf merges (a mapping into a mapping key by key,
anything else replacing what it meets, a list whole), then the two as the configured strategy
merges them (an environment without files is empty, and given none): Kedro's order. Only where
that is Kedro's answer exactly: no interpolation in the files (nor a backslash, an escape that
could spell one) or the runtime parameters, no OmegaConf missing value (``???``, which a merge
skips), no key but a string, no value but what JSON spells (a tuple OmegaConf turns into a list
or not).
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kedro.config import OmegaConfigLoader
from omegaconf.basecontainer import BaseContainer

_CACHE: OrderedDict[str, Any] = OrderedDict()
_CACHE_SIZE = 64  # keys × projects × parameter sets one process sees; each entry is small
_LOCK = threading.Lock()

_UNCACHED = frozenset({"credentials"})  # read environment variables: not a function of the files
_PURE_RESOLVERS = frozenset({"globals", "runtime_params"})  # besides OmegaConf's own but oc.env
_MERGED_WITH_RUNTIME = "parameters"  # the key Kedro merges the runtime parameters into


class _Unlike(Exception):
    """The shortcut's merge could differ from OmegaConf's here: Kedro answers instead."""


class CachedConfigLoader(OmegaConfigLoader):
    """``OmegaConfigLoader`` whose results are cached by content (see the module docstring)."""

    def __getitem__(self, key: str) -> dict[str, Any]:
        if key in self or key in _UNCACHED or not _pure_resolvers():
            return super().__getitem__(key)
        if key == _MERGED_WITH_RUNTIME and self.runtime_params:
            try:
                return self._merged_with_runtime(key)
            except _Unlike:
                pass
        found = self._address(key, "merged", self.runtime_params or {})
        if found is None:
            return super().__getitem__(key)
        value, _ = self._kept(
            found[0],
            lambda: self._address(key, "merged", self.runtime_params or {}),
            lambda: super(CachedConfigLoader, self).__getitem__(key),
        )
        merged: dict[str, Any] = value  # what Kedro's __getitem__ gives, cached
        return merged

    def _merged_with_runtime(self, key: str) -> dict[str, Any]:
        """``key``'s configuration with the runtime parameters merged in as Kedro merges them,
        from its environments' configurations without them (kept); raises :class:`_Unlike`
        where that may not be Kedro's answer (the module docstring)."""
        strategy = self.merge_strategy.get(key, "destructive")
        found = self._address(key, "layers", {})
        if strategy not in ("soft", "destructive") or found is None or found[1]:
            raise _Unlike  # another strategy, a remote folder, an interpolation in a file
        runtime = _plain(self.runtime_params)
        layers, kept = self._kept(
            found[0], lambda: self._address(key, "layers", {}), lambda: self._layers(key)
        )
        if layers is None or not kept:  # or a file changed since it was found plain
            raise _Unlike
        # Kedro merges the runtime parameters into each environment that has files, an
        # environment without files is {}, and then the run environment into the base's
        base, *env = [{} if layer is None else _merge(layer, runtime) for layer in layers]
        if not env:
            return base
        if strategy == "soft":
            return _merge(base, env[0])
        base.update(env[0])
        return base

    def _layers(self, key: str) -> tuple[dict[str, Any] | None, ...] | None:
        """``key``'s configuration of the base environment, and of the run environment unless
        that is the base, each as Kedro resolves it without runtime parameters (None for one
        without files); None where merging into them may differ from Kedro (no file at all:
        Kedro says so in its words)."""
        plain = copy.copy(self)
        plain.runtime_params = {}
        base_configs, env_configs, _, _, files = plain._read_raw_config(key)
        if not files:
            return None
        run_env = self.env or self.default_run_env
        configs = [base_configs] if run_env == self.base_env else [base_configs, env_configs]
        layers = tuple(plain._merge_and_resolve(key, c) if c else None for c in configs)
        try:
            for layer in layers:
                _plain(layer or {})
        except _Unlike:
            return None
        return layers

    def _kept(
        self, address: str, again: Callable[[], tuple[str, bool] | None], read: Callable[[], Any]
    ) -> tuple[Any, bool]:
        """What ``read`` answers for ``address`` (a copy: callers change what they get), and
        whether it is what the files at ``address`` give: from the cache, or kept there if
        ``again`` (the address computed anew) finds that no file changed while ``read`` read
        them."""
        with _LOCK:
            if address in _CACHE:
                _CACHE.move_to_end(address)
                return copy.deepcopy(_CACHE[address]), True
        value = read()
        now = again()
        kept = now is not None and now[0] == address
        if kept:
            with _LOCK:
                _CACHE[address] = copy.deepcopy(value)
                while len(_CACHE) > _CACHE_SIZE:
                    _CACHE.popitem(last=False)
        return value, kept

    def _address(
        self, key: str, what: str, runtime_params: dict[str, Any]
    ) -> tuple[str, bool] | None:
        """The content address of what is kept of ``key``'s configuration under
        ``runtime_params`` (``what``: ``merged``, Kedro's answer, or ``layers``, its
        environments' configurations), and whether a file of it may hold an interpolation; None
        where it cannot be known (a remote configuration folder, a key without patterns, values
        JSON cannot spell)."""
        if self._protocol != "file" or key not in self.config_patterns:
            return None
        digest = hashlib.sha256()
        interpolated = reads_runtime = False
        run_env = self.env or self.default_run_env
        for env in dict.fromkeys((self.base_env, run_env)):
            folder = Path(self.conf_source) / env
            digest.update(f"{env}\0{folder.is_dir()}\0".encode())
            for path in self._files(folder, key):
                content = path.read_bytes()
                escaped = b"\\" in content  # a YAML or JSON escape may spell either
                interpolated = interpolated or escaped or b"${" in content
                reads_runtime = reads_runtime or escaped or b"runtime_params" in content
                digest.update(f"{path.relative_to(folder)}\0{len(content)}\0".encode())
                digest.update(content)
        try:
            state = json.dumps(
                [
                    key,
                    what,
                    # only the parameters and the runtime_params resolver read them
                    _canonical(
                        runtime_params if key == _MERGED_WITH_RUNTIME or reads_runtime else {}
                    ),
                    _canonical(getattr(self, "_globals", {}) if key != "globals" else {}),
                    _canonical(self.merge_strategy),
                    self.restrict_runtime_params_type_selection,
                ]
            )
        except TypeError:
            return None
        digest.update(state.encode())
        return digest.hexdigest(), interpolated

    def _files(self, folder: Path, key: str) -> list[Path]:
        """The files ``key``'s patterns match in ``folder``, found as Kedro finds them."""
        if not folder.is_dir():
            return []
        found = {
            Path(each)
            for pattern in self.config_patterns[key]
            for each in self._fs.glob((folder / pattern).as_posix())
            if not self.ignore_hidden or not self._is_hidden(each)
        }
        return sorted(path for path in found if self._is_valid_config_path(path))


def _pure_resolvers() -> bool:
    """Whether every resolver registered in this process answers from the address's inputs."""
    names = getattr(BaseContainer, "_resolvers", None)
    if not isinstance(names, dict):
        return False
    return all(
        name in _PURE_RESOLVERS or (name.startswith("oc.") and name != "oc.env") for name in names
    )


def _canonical(value: Any) -> Any:
    """``value`` in a form JSON spells one way only: mapping keys sorted and typed (``1`` and
    ``"1"`` stay apart), sequences as lists; anything else JSON cannot spell raises TypeError."""
    if isinstance(value, dict):
        return [
            [repr(k), _canonical(v)] for k, v in sorted(value.items(), key=lambda i: repr(i[0]))
        ]
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"no canonical form for {type(value).__name__}")


def _plain(value: Any) -> Any:
    """``value`` itself where OmegaConf would hold it unchanged: mappings with string keys,
    lists, and scalars JSON spells, no string an interpolation or OmegaConf's missing value;
    raises :class:`_Unlike` otherwise."""
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise _Unlike
        for item in value.values():
            _plain(item)
    elif isinstance(value, list):
        for item in value:
            _plain(item)
    elif isinstance(value, str):
        if "${" in value or value == "???":
            raise _Unlike
    elif not (value is None or isinstance(value, bool | int | float)):
        raise _Unlike  # a tuple among them: OmegaConf turns some into lists, not all
    return value


def _merge(into: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``extra`` merged into ``into`` (changed and returned) as OmegaConf merges plain data: a
    mapping into a mapping key by key, anything else replacing what it meets, a list whole; a
    mapping meeting a list or a list a mapping is OmegaConf's error (:class:`_Unlike`)."""
    for name, value in extra.items():
        held = into.get(name)
        if isinstance(value, dict) and isinstance(held, dict):
            _merge(held, value)
        elif {type(value), type(held)} == {dict, list}:
            raise _Unlike  # OmegaConf cannot merge them: Kedro's error, in its words
        else:
            into[name] = copy.deepcopy(value)
    return into
