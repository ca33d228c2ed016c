"""Planning from the checked run: what was checked is what trains, nothing built a second time."""

from unittest import mock

from seq2final.methods import space_of
from seq2final.runs.planner import plan_run
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
