"""Known, harmless warnings from the libraries we build on, silenced by module and message.

A newcomer's run should show our progress, not deprecations we cannot act on. Each entry names
the warning's category, the module it is attributed to and the start of its message, so any other
warning (ours, or a new one from these libraries) still shows.
"""

from __future__ import annotations

import logging
import re
import warnings

# (category, module regex, message regex): why each is harmless.
KNOWN_WARNINGS = (
    # Kedro 1.7 and kedro-mlflow 2.0 call OmegaConf's old resolver API, which still works.
    (
        UserWarning,
        r"(kedro\.config\.omegaconf_config|kedro_mlflow\..*)",
        r"register_new_resolver\(\) is deprecated",
    ),
    # kedro-mlflow's pipeline model has no type hints on `predict`; ours (tracking/pyfunc.py) has them.
    (
        UserWarning,
        r"mlflow\.pyfunc\.utils\.data_validation",
        r"(\x1b\[\d+m)?Add type hints to the `predict` method",
    ),
    # Optuna's trial heartbeats (RDB storages) are marked experimental; we use them on purpose.
    (
        Warning,
        r"(optuna|seq2final)(\..*)?",
        r"(Argument ``(heartbeat_interval|grace_period)``|"
        r"optuna\.storages\._heartbeat\.fail_stale_trials) is (an )?experimental",
    ),
    # POT's network simplex at its iteration cap: data/distances.py's wasserstein2 logs it with
    # the pair it was solving (a filter installed once: W2 pairs are solved in threads, and
    # catch_warnings() is not thread-safe).
    (UserWarning, r"ot\.lp\._network_simplex", r"numItermax reached before optimality"),
    # The tuner asks and tells trials itself and records their heartbeats around each one.
    (
        UserWarning,
        r"optuna\.study\.study",
        r"Heartbeat of storage is supposed to be used with Study\.optimize",
    ),
)


def silence_known_warnings() -> None:
    """Install the filters of :data:`KNOWN_WARNINGS` (idempotent)."""
    for category, module, message in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)
    # Kedro's logging config may not name filter factories ("()"), so the logger gets it here.
    logger = logging.getLogger("py.warnings")
    if not any(isinstance(f, KnownWarningsFilter) for f in logger.filters):
        logger.addFilter(KnownWarningsFilter())


class KnownWarningsFilter(logging.Filter):
    """The same entries for warnings that reach the ``py.warnings`` logger anyway.

    MLflow wraps its type-hint check in ``catch_warnings()`` with ``simplefilter("once")``, which
    replaces every installed filter for that call; Kedro then logs the warning. Records there read
    ``<path>:<line>: <Category>: <message>``, so the module is matched as a path.
    """

    _patterns = tuple(
        re.compile(module.replace(r"\.", "/") + r"\.py:\d+: " + category.__name__ + ": " + message)
        for category, module, message in KNOWN_WARNINGS
    )

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not any(pattern.search(text) for pattern in self._patterns)
