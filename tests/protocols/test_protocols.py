"""Each protocol's views and its score, computed by hand on scripted per-step accuracies."""

import pytest

from seq2final.core.errors import Seq2FinalError, UnknownNameError
from seq2final.protocols import PROTOCOLS, ProtocolOptions, View, prefix
from seq2final.training.records import StepScore

STEPS = 6  # steps 0..5


def scripted(view_accuracies: dict[int, tuple[float, float]], sizes=None):
    """Per step: (train accuracy, test accuracy), test sizes 100 unless given."""
    sizes = sizes or {}
    return {
        step: StepScore(train=train, test=test, test_size=sizes.get(step, 100))
        for step, (train, test) in view_accuracies.items()
    }


def test_eval_fix_reports_pooled_id_and_the_unweighted_mean_and_minimum_of_later_steps():
    options = ProtocolOptions(split_step=2)
    eval_fix = PROTOCOLS["eval_fix"]
    assert eval_fix.views(STEPS, options) == [View("0-2", (0, 1, 2))]
    steps = scripted(
        {0: (1.0, 0.9), 1: (1.0, 0.6), 2: (1.0, 0.8), 3: (0.5, 0.7), 4: (0.5, 0.4), 5: (0.5, 0.55)},
        sizes={0: 100, 1: 300, 2: 100, 3: 100, 4: 900, 5: 100},
    )
    score = eval_fix.score({"0-2": steps}, STEPS, options)
    assert score["id_accuracy"] == pytest.approx((90 + 180 + 80) / 500)  # pooled, by size
    assert score["ood_per_step"] == {3: 0.7, 4: 0.4, 5: 0.55}
    assert score["ood_average"] == pytest.approx((0.7 + 0.4 + 0.55) / 3)  # sizes do not weigh
    assert score["ood_worst"] == 0.4


def test_eval_fix_splits_in_the_middle_by_default():
    assert PROTOCOLS["eval_fix"].views(STEPS, ProtocolOptions()) == [prefix(2)]
    assert PROTOCOLS["eval_fix"].views(9, ProtocolOptions()) == [prefix(4)]


def test_a_presets_split_step_applies_on_its_own_dataset_unless_one_is_given():
    from seq2final.protocols import options_for

    assert options_for(ProtocolOptions(), "yearbook", "portraits_1y").split_step == 40
    assert options_for(ProtocolOptions(split_step=30), "yearbook", "portraits_1y").split_step == 30
    # the preset's steps are years; on the 5-year blocks its 1970 is another step
    assert options_for(ProtocolOptions(), "yearbook", "portraits_5y").split_step is None
    assert options_for(ProtocolOptions(), "rot8", "npz").split_step is None


def test_the_yearbook_presets_stream_window_is_wild_times_ten_years_unless_one_is_given():
    from seq2final.protocols import options_for

    assert options_for(ProtocolOptions(), "yearbook", "portraits_1y").window == 10
    assert options_for(ProtocolOptions(window=3), "yearbook", "portraits_1y").window == 3
    assert options_for(ProtocolOptions(), "yearbook", "portraits_5y").window == 2  # not its data
    assert options_for(ProtocolOptions(), "digits_clr", "digits").window == 2


def test_eval_stream_scores_each_time_over_its_window_then_averages_over_time():
    options = ProtocolOptions(window=2)
    stream = PROTOCOLS["eval_stream"]
    # from time 0, the model of step 0 alone, as Wild-Time's Eval-Stream
    assert [v.name for v in stream.views(STEPS, options)] == ["0-0", "0-1", "0-2", "0-3"]
    assert stream.views(STEPS, options)[0].steps == (0,)
    test = {
        "0-0": {1: 0.9, 2: 0.5},
        "0-1": {2: 0.8, 3: 0.6},
        "0-2": {3: 0.7, 4: 0.5},
        "0-3": {4: 0.9, 5: 0.3},
    }
    accuracies = {
        view: scripted(
            {s: (0.0, 0.0) for s in range(STEPS)} | {s: (0.0, a) for s, a in row.items()}
        )
        for view, row in test.items()
    }
    score = stream.score(accuracies, STEPS, options)
    assert [(r["time"], r["average"], r["worst"]) for r in score["per_time"]] == [
        (0, pytest.approx(0.7), 0.5), (1, pytest.approx(0.7), 0.6), (2, pytest.approx(0.6), 0.5),
        (3, pytest.approx(0.6), 0.3),
    ]  # fmt: skip
    assert score["average"] == pytest.approx((0.7 + 0.7 + 0.6 + 0.6) / 4)
    assert score["worst"] == pytest.approx((0.5 + 0.6 + 0.5 + 0.3) / 4)


def test_eval_stream_reports_feature_forgettings_p_cl_and_p_forget_by_hand():
    """Steps 0..4, window 1: times 0..3. Each time's model's test accuracy on the steps it has
    seen (rows: time; columns: step; 0.1 on a step not yet seen); P_forget is Feature
    Forgetting's Eq. 8: over the steps seen, the best any time's model up to now scored on the
    step minus now's."""
    options = ProtocolOptions(window=1)
    seen = {0: [0.8], 1: [0.6, 0.9], 2: [0.7, 0.5, 0.4], 3: [0.2, 0.6, 0.3, 0.9]}
    accuracies = {
        f"0-{t}": scripted({s: (0.0, row[s] if s < len(row) else 0.1) for s in range(5)})
        for t, row in seen.items()
    }
    score = PROTOCOLS["eval_stream"].score(accuracies, 5, options)
    p_cl = [r["p_cl"] for r in score["per_time"]]
    assert p_cl == pytest.approx([0.8, 0.75, 1.6 / 3, 0.5])
    forget = [r["p_forget"] for r in score["per_time"]]
    # time 0: 0; time 1: step 0 0.8 − 0.6, step 1 0; time 2: step 0 max(0.8, 0.6, 0.7) − 0.7,
    # step 1 0.9 − 0.5, step 2 0; time 3: 0.8 − 0.2, 0.9 − 0.6, 0.4 − 0.3 and 0
    assert forget == pytest.approx([0.0, 0.2 / 2, (0.1 + 0.4) / 3, (0.6 + 0.3 + 0.1) / 4])
    assert score["p_cl"] == p_cl[-1] and score["p_forget"] == forget[-1]


def test_test_then_train_scores_each_step_by_the_model_trained_before_it():
    stream = PROTOCOLS["test_then_train"]
    assert [v.name for v in stream.views(STEPS, ProtocolOptions())] == ["0-1", "0-2", "0-3", "0-4"]
    accuracies = {}
    for t in range(1, 5):
        # each view's model fits its own steps perfectly (train 1.0) and the next one at 0.1·t
        row = {s: (1.0 if s <= t else 0.1 * t, 0.0) for s in range(STEPS)}
        accuracies[prefix(t).name] = scripted(row)
    score = PROTOCOLS["test_then_train"].score(accuracies, STEPS, ProtocolOptions())
    assert score["curve"] == {2: pytest.approx(0.1), 3: pytest.approx(0.2),
                              4: pytest.approx(0.3), 5: pytest.approx(0.4)}  # fmt: skip
    assert score["stream_accuracy"] == pytest.approx(0.25)


def test_the_mixed_split_tests_eval_fixs_steps_with_mixed_training_data():
    options = ProtocolOptions(split_step=3)
    (view,) = PROTOCOLS["mixed_split"].views(STEPS, options)
    assert view.mixed and view.steps == (0, 1, 2, 3) and view.name != prefix(3).name
    steps = scripted({s: (1.0, 0.5 + 0.1 * s) for s in range(STEPS)})
    score = PROTOCOLS["mixed_split"].score({view.name: steps}, STEPS, options)
    assert score["ood_per_step"] == {4: pytest.approx(0.9), 5: pytest.approx(1.0)}
    assert score["ood_worst"] == pytest.approx(0.9)


def test_final_trains_the_sequence_itself():
    final = PROTOCOLS["final"]
    assert not final.temporal and final.views(STEPS, ProtocolOptions()) == []


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("eval_fix", {"split_step": 5}, r"split_step 5 is outside the sequence \(steps 0..5\); valid: 1..4"),
        ("eval_fix", {"split_step": 0}, r"split_step 0 is outside .* valid: 1..4"),
        ("mixed_split", {"split_step": 9}, r"split_step 9 is outside .* valid: 1..4"),
        ("eval_stream", {"window": 0}, r"window 0: valid: 1..4"),
        ("eval_stream", {"window": 5}, r"window 5 is past the end .* valid: 1..4"),
    ],
)  # fmt: skip
def test_bad_options_are_one_line_naming_the_value_and_the_valid_range(name, options, message):
    with pytest.raises(Seq2FinalError, match=message):
        PROTOCOLS[name].views(STEPS, ProtocolOptions(**options))


def test_an_unknown_protocol_lists_the_valid_ones():
    with pytest.raises(
        UnknownNameError, match="unknown protocol 'eval_fixed'; valid: final, eval_fix"
    ):
        PROTOCOLS["eval_fixed"]


_STREAM = {"sequence": "source100:rotation60:corruption100:label_flip60", "dataset": "digits",
           "build_sequences": {"test_size": 50}, "arch": "convnet_1", "budget": "smoke",
           "training": {"device": "cpu"}}  # fmt: skip


def test_a_plan_for_one_view_holds_only_that_views_states_and_jobs(checked_run):
    from seq2final.runs.planner import plan_run

    def plan(**extra):
        run = checked_run(**_STREAM, method="sft", protocol="eval_stream",
                          protocol_options={"window": 1}, **extra)  # fmt: skip
        return plan_run(run, "data")

    every, one = plan(), plan(protocol_view="0-2")
    assert sorted(job.view.name for job in every.jobs) == ["0-0", "0-1", "0-2"]
    # SFT's states: the step-0 model, and its chain of steps 0..0 and 0..1, each extending
    # the one before (view 0-2 continues the chain of 0..1)
    (step0,) = [s for s in every.states if s.mode == "step0"]
    chain = {s.view.name: s for s in every.states if s.mode == "sequential"}
    assert sorted(chain) == ["0-0", "0-1"]
    assert chain["0-0"].step0_key == step0.key and chain["0-0"].extends is None
    assert chain["0-1"].extends == chain["0-0"].key
    assert {job.view.name: job.state_key for job in every.jobs if job.state_key} == {
        "0-1": chain["0-0"].key,
        "0-2": chain["0-1"].key,
    }
    assert [job.view.name for job in one.jobs] == ["0-2"]
    assert {job.key for job in one.jobs} <= {job.key for job in every.jobs}  # the same keys
    (job,) = one.jobs
    assert one.job_params(job)["protocol_view"] == "0-2"
    assert "protocol_view:0-2" in one.command("adapt_final", job)
    assert "protocol_options.window:1" in one.command("adapt_final", job)


def test_a_warm_started_view_plans_the_earlier_times_pooled_jobs_it_continues(checked_run):
    from seq2final.runs.planner import plan_run

    def plan(**extra):
        run = checked_run(**_STREAM, method=["erm", "sft"], protocol="eval_stream",
                          protocol_options={"window": 1, "warm_start": True}, **extra)  # fmt: skip
        return plan_run(run, "data")

    every, one = plan(), plan(protocol_view="0-2")
    erm = {job.view.name: job for job in every.jobs if job.final == "all_erm"}
    (first,) = [job for job in every.jobs if job.view.name == "0-0"]
    assert erm["0-1"].warm_start == first.key and erm["0-2"].warm_start == erm["0-1"].key
    assert all(job.warm_start is None for job in every.jobs if job.final != "all_erm")
    # one view: its jobs, and the earlier times' jobs its warm start continues (not SFT's)
    assert sorted((job.view.name, job.final) for job in one.jobs) == [
        ("0-0", "scratch"),
        ("0-1", "all_erm"),
        ("0-2", "all_erm"),
        ("0-2", "ft"),
    ]
    assert {job.key for job in one.jobs} <= {job.key for job in every.jobs}
    assert [name for name, _ in one.requested] == ["erm", "sft"]  # what the run reports
