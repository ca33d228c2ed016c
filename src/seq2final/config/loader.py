"""Kedro's ``OmegaConfigLoader`` with a per-process cache of what it parses and merges.

Every Kedro session reads the project's configuration again: OmegaConf parses each YAML file
into nodes, merges them and resolves interpolations, about 0.4 s per key for the parameters and
the catalog on a 2-core machine (``docs/architecture.md``, "Start-up"). A sweep's workers and a
test process open many sessions on the same files, so the result of each key is kept in memory,
addressed by everything it depends on: the key, the environments, the bytes of every file the
key's patterns match (and the globals files it may interpolate), the runtime parameters and the
merge strategy. A changed file or parameter is a new address, so nothing stale is ever returned.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

from kedro.config import OmegaConfigLoader

_CACHE: OrderedDict[str, dict[str, Any]] = OrderedDict()
_CACHE_SIZE = 64  # keys × projects × parameter sets one process sees; each entry is small

_UNCACHED = frozenset({"credentials"})  # read environment variables: not a function of the files


class CachedConfigLoader(OmegaConfigLoader):
    """``OmegaConfigLoader`` whose results are cached by content (see the module docstring)."""

    def __getitem__(self, key: str) -> dict[str, Any]:
        if key in self or key in _UNCACHED or self._custom_resolvers:
            return super().__getitem__(key)
        address = self._address(key)
        if address is None:
            return super().__getitem__(key)
        if address not in _CACHE:
            _CACHE[address] = super().__getitem__(key)
            while len(_CACHE) > _CACHE_SIZE:
                _CACHE.popitem(last=False)
        _CACHE.move_to_end(address)
        return copy.deepcopy(_CACHE[address])  # callers may change what they get

    def _address(self, key: str) -> str | None:
        """The content address of ``key``'s configuration, or None where it cannot be known
        (a remote configuration folder, a key without patterns)."""
        if self._protocol != "file" or key not in self.config_patterns:
            return None
        digest = hashlib.sha256()
        run_env = self.env or self.default_run_env
        envs = dict.fromkeys((self.base_env, run_env))
        keys = (key,) if key == "globals" else (key, "globals")  # ${globals:...} reads globals
        for name in keys:
            for env in envs:
                folder = Path(self.conf_source) / env
                for path in self._files(folder, name):
                    digest.update(f"{name}\0{env}\0{path.relative_to(folder)}\0".encode())
                    digest.update(path.read_bytes())
        try:
            runtime = json.dumps(self.runtime_params or {}, sort_keys=True)
        except TypeError:  # a value JSON cannot spell: no safe address
            return None
        digest.update(runtime.encode())
        digest.update(json.dumps([key, list(envs), self.merge_strategy]).encode())
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
