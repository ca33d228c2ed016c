"""Project settings (see Kedro's configuration docs for the defaults left untouched here)."""

from kedro.config import OmegaConfigLoader

from seq2final.hooks import ValidateParametersHook

HOOKS = (ValidateParametersHook(),)

CONFIG_LOADER_CLASS = OmegaConfigLoader
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
    "merge_strategy": {"parameters": "soft"},
}
