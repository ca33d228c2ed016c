"""Methods: a historical mode followed by a final mode, their registries and the paper's 18.

What a new method needs is importable from here: the registries and their decorators, the types a
mode returns, the :class:`Context` it trains in, and the helpers the built-in modes use.
"""

# Registers the built-ins, in the order the registries list them: the paper's methods and
# modes, then Wild-Time's, then NED's heads and Feature Forgetting's gates.
from seq2final.methods import catalogue, historical, final, wild_time, continual, heads, gates  # noqa: F401, I001
from seq2final.core.schema import StrictModel
from seq2final.methods.modes import (
    FINAL_MODES,
    HISTORICAL_MODES,
    METHODS,
    FinalMode,
    FinalOutcome,
    HistoricalMode,
    HistoricalState,
    MethodRecipe,
    ModelChain,
    chain_mode,
    final_mode,
    from_step0,
    historical_mode,
    method,
)
from seq2final.methods.catalogue import ORACLE, JobNames, paper_columns
from seq2final.methods.blocks import ModeBlock, settings_of, space_of
from seq2final.methods.context import Context
from seq2final.methods.final import chain_space, continue_chains, fine_tune_chain, stage_name
from seq2final.methods.requests import RequestedJob, requested_jobs

__all__ = [
    "FINAL_MODES", "HISTORICAL_MODES", "METHODS", "ORACLE", "Context", "FinalMode", "FinalOutcome",
    "HistoricalMode", "HistoricalState", "JobNames", "MethodRecipe", "ModeBlock", "ModelChain", "RequestedJob",
    "StrictModel", "chain_mode", "chain_space", "continue_chains", "final_mode", "fine_tune_chain", "from_step0",
    "historical_mode", "method", "paper_columns",
    "requested_jobs", "settings_of", "space_of", "stage_name",
]  # fmt: skip
