"""Project settings (see Kedro's configuration docs for the defaults left untouched here)."""

from kedro.config import OmegaConfigLoader

from seq2final.hooks import TrackingHook, ValidateParametersHook

HOOKS = (ValidateParametersHook(), TrackingHook())
# kedro-mlflow's own hook is replaced by TrackingHook, its subclass that a parameter switches off.
DISABLE_HOOKS_FOR_PLUGINS = (
    "kedro_mlflow",
    "kedro-mlflow",
)  # the name as installed, either spelling

CONFIG_LOADER_CLASS = OmegaConfigLoader
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
    "merge_strategy": {"parameters": "soft"},
}
