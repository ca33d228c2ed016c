"""Planning from the checked run: what was checked is what trains, nothing built a second time."""

from unittest import mock

from seq2final.methods import JobNames, space_of
from seq2final.runs.planner import plan_run, planned_names
from seq2final.training import search


def test_a_plan_holds_the_checked_objects_and_parses_nothing(checked_run):
    run = checked_run(sequence="digits_clr", method=["sft", "ft"], arch="convnet_1",
                      budget="smoke")  # fmt: skip
    blocks = run.mode_blocks()
    with mock.patch.object(search.SearchSpace, "parse", side_effect=AssertionError("parsed")):
        plan = plan_run(run, "content")
        (ft,) = [job for job in plan.jobs if job.final == "ft" and job.historical == "erm"]
        # a mode reads its space as it was parsed by the check, not parsed again
        assert space_of(ft.config, "space", "final_modes.ft") is blocks.final["ft"].spaces["space"]
    assert plan.budget is run.budget and plan.engine is run.parameters.training
    assert plan.tuning is run.parameters.tuning and plan.mlflow is run.parameters.mlflow
    assert ft.config is blocks.final["ft"]
    (step0,) = [state for state in plan.states if state.mode == "step0"]
    assert step0.config is blocks.step0
    # the keys hash a block's values as written: the checked block reads as that mapping
    assert dict(ft.config) == run.parameters.final_modes["ft"]


def test_a_block_without_a_check_is_parsed_where_it_is_read():
    raw = {"space": {"lr": {"grid": [0.1]}}}
    assert space_of(raw, "space", "final_modes.ft").params["lr"].grid == (0.1,)


def test_every_state_and_job_is_seeded_by_its_key_under_any_budget(checked_run):
    """The keys name the budget (its results differ); the seed keys do not (one configuration
    trains the same under every budget), and still tell every state and job apart."""
    plans = [
        plan_run(checked_run(sequence="digits_clr", method=["sft", "ft", "baseline"],
                             arch="convnet_1", budget=budget), "content")
        for budget in ("smoke", "paper")
    ]  # fmt: skip
    smoke, paper = plans
    assert [s.key for s in smoke.states] != [s.key for s in paper.states]
    assert [j.key for j in smoke.jobs] != [j.key for j in paper.jobs]
    assert [s.seed_key for s in smoke.states] == [s.seed_key for s in paper.states]
    assert [j.seed_key for j in smoke.jobs] == [j.seed_key for j in paper.jobs]
    seeds = [x.seed_key for x in (*smoke.states, *smoke.jobs)]
    assert len(set(seeds)) == len(seeds) and "smoke" not in "".join(seeds)


def test_the_names_read_without_planning_are_the_plans_names(checked_run):
    """The tracking hook checks names before any work from ``planned_names``, which makes no
    key: the names and views it gives are exactly those of the plan the pipeline makes, for
    merged requests (``st_1`` and ``st_b`` on a ConvNet), a temporal protocol's views (time 0's
    one model) and one view of a warm-started stream."""
    stream = {"sequence": "source100:rotation60:corruption100:label_flip60", "dataset": "digits",
              "build_sequences": {"test_size": 50}, "protocol_options": {"window": 1}}  # fmt: skip
    runs = [
        checked_run(sequence="digits_clr", method=["st_1", "st_b", "ft"], arch="convnet_1"),
        checked_run(**stream, protocol="eval_stream", method=["erm", "ft"], arch="convnet_1"),
        checked_run(**{**stream, "protocol_options": {"window": 1, "warm_start": True}},
                    protocol="eval_stream", protocol_view="0-2", method="ft", arch="convnet_1"),
        checked_run(sequence="digits_clr", arch="convnet_1"),  # every method
    ]  # fmt: skip
    for run in runs:
        plan = plan_run(run, "content")
        planned = {(job.names, job.view.name if job.view else None) for job in plan.jobs}
        assert set(planned_names(run)) == planned
    merged = {names for names, _ in planned_names(runs[0])}
    assert JobNames("st_1", ("st_b",)) in merged
