"""The end of a run lists where its outputs are: only what this run wrote."""

import copy

from seq2final.config.checks import CheckedParameters
from seq2final.hooks import RunSummaryHook
from seq2final.pipelines.visualize import create_pipeline as visualize_pipeline


def test_the_figures_line_lists_only_folders_this_run_drew_into(project_parameters):
    checked = CheckedParameters()
    checked.check({**copy.deepcopy(project_parameters), "mlflow": {"enabled": False}})
    hook = RunSummaryHook(checked)
    outputs = visualize_pipeline().all_outputs() | {"adapt_results"}
    hook.after_dataset_saved("svcca_figures", {"digits_clr-digits/tour-convnet_4-seed1-svcca": 1})
    hook.after_dataset_saved("compute_figures", {"digits_clr-digits/tour-compute": 1})
    hook.after_dataset_saved("protocol_figures", {})  # nothing to draw: nothing saved
    hook.after_dataset_saved("adapt_results", {"key": {}})

    lines = hook._locations(outputs)

    figures = [line for line in lines if line.startswith("Figures:")]
    assert figures == [
        "Figures: data/08_reporting/{compute,svcca}_figures/digits_clr-digits/ (PNG, PDF)"
    ]
    hook._drawn.clear()  # a run that drew nothing names no figure folder
    assert not [line for line in hook._locations(outputs) if line.startswith("Figures:")]
