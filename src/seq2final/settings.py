"""Project settings (see Kedro's configuration docs for the defaults left untouched here)."""

import importlib.util
import sys

from seq2final.core.console import plain_when_piped
from seq2final.core.known_warnings import silence_known_warnings
from seq2final.core.startup import exit_without_collecting

# Kedro's MemoryDataset tries `import ibis` for every value it holds, and Python looks for a
# missing module along the whole path each time: about 900 times a session (one per parameter),
# 0.3 s. Where ibis is not installed, say so once: None in sys.modules fails the import at once.
if importlib.util.find_spec("ibis") is None:
    sys.modules["ibis"] = None  # type: ignore[assignment]
silence_known_warnings()  # before the imports below, which set some of them off
plain_when_piped()  # Kedro has configured logging by now: one line per record in a log file
exit_without_collecting()

from seq2final.config.loader import CachedConfigLoader  # noqa: E402
from seq2final.hooks import project_hooks  # noqa: E402

HOOKS = project_hooks()
# kedro-mlflow's own hook (and its pipeline run) is replaced by TrackingHook, which reads the same
# mlflow.yml, checks it before any work and files the summary run; a parameter switches it off.
DISABLE_HOOKS_FOR_PLUGINS = (
    "kedro_mlflow",
    "kedro-mlflow",
)  # the name as installed, either spelling

CONFIG_LOADER_CLASS = CachedConfigLoader
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
    "merge_strategy": {"parameters": "soft"},
}
