"""Project hooks."""

from __future__ import annotations

from kedro.framework.context import KedroContext
from kedro.framework.hooks import hook_impl

from seq2final.params import validate_parameters


class ValidateParametersHook:
    """Check every run parameter as soon as the context exists, so a typo costs no work."""

    @hook_impl
    def after_context_created(self, context: KedroContext) -> None:
        validate_parameters(context.params)
