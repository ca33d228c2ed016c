"""Kedro's ``OmegaConfigLoader`` with a per-process cache of what it parses and merges.

Every Kedro session reads the project's configuration again: OmegaConf parses each YAML file
into nodes, merges them and resolves interpolations, tenths of a second of CPU for the
parameters and the catalog (``docs/architecture.md``, "Start-up"). A sweep's workers and a test
process open many sessions on the same files, so the result of each key is kept in memory,
addressed by everything Kedro's resolution reads: the key, the environments and whether their
folders exist, the bytes of every file the key's patterns match, the globals the loader holds,
the runtime parameters, the merge strategy and the runtime-parameter type guard. The cache is
used only while every resolver registered in the process is one whose answer depends on those
alone (OmegaConf's own but ``oc.env``, Kedro's ``globals`` and ``runtime_params``), and never for
credentials, which read environment variables. A file changed while it is read is not cached.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from kedro.config import OmegaConfigLoader
from omegaconf.basecontainer import BaseContainer

_CACHE: OrderedDict[str, dict[str, Any]] = OrderedDict()
_CACHE_SIZE = 64  # keys × projects × parameter sets one process sees; each entry is small
_LOCK = threading.Lock()

_UNCACHED = frozenset({"credentials"})  # read environment variables: not a function of the files
_PURE_RESOLVERS = frozenset({"globals", "runtime_params"})  # besides OmegaConf's own but oc.env


class CachedConfigLoader(OmegaConfigLoader):
    """``OmegaConfigLoader`` whose results are cached by content (see the module docstring)."""

    def __getitem__(self, key: str) -> dict[str, Any]:
        if key in self or key in _UNCACHED or not _pure_resolvers():
            return super().__getitem__(key)
        address = self._address(key)
        if address is None:
            return super().__getitem__(key)
        with _LOCK:
            cached = _CACHE.get(address)
            if cached is not None:
                _CACHE.move_to_end(address)
        if cached is None:
            cached = super().__getitem__(key)
            if self._address(key) == address:  # no file changed while Kedro read them
                with _LOCK:
                    _CACHE[address] = cached
                    while len(_CACHE) > _CACHE_SIZE:
                        _CACHE.popitem(last=False)
        return copy.deepcopy(cached)  # callers may change what they get

    def _address(self, key: str) -> str | None:
        """The content address of ``key``'s configuration, or None where it cannot be known
        (a remote configuration folder, a key without patterns, values JSON cannot spell)."""
        if self._protocol != "file" or key not in self.config_patterns:
            return None
        digest = hashlib.sha256()
        run_env = self.env or self.default_run_env
        for env in dict.fromkeys((self.base_env, run_env)):
            folder = Path(self.conf_source) / env
            digest.update(f"{env}\0{folder.is_dir()}\0".encode())
            for path in self._files(folder, key):
                content = path.read_bytes()
                digest.update(f"{path.relative_to(folder)}\0{len(content)}\0".encode())
                digest.update(content)
        try:
            state = json.dumps(
                [
                    key,
                    _canonical(self.runtime_params or {}),
                    _canonical(getattr(self, "_globals", {}) if key != "globals" else {}),
                    _canonical(self.merge_strategy),
                    self.restrict_runtime_params_type_selection,
                ]
            )
        except TypeError:
            return None
        digest.update(state.encode())
        return digest.hexdigest()

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
