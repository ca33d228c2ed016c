"""Policies judged on stored grids: which fits a grid budget leaves for replay, success on test
within the margin, spend, the Clopper–Pearson bound and the noise floor."""

import math

import pytest

from seq2final.bench.replay import (
    GridFit,
    Policy,
    grid_fits,
    judge,
    known_orders,
    lower_bound,
    noise_floor,
    parse_policy,
    summarize,
)
from seq2final.core.errors import Seq2FinalError
from seq2final.training.records import FitRecord, TrialRecord


def trial(number, lr, curve, test, state="COMPLETE"):
    return TrialRecord(number=number, state=state, params={"lr": lr}, value=max(curve),
                       valid_curve=curve, test_accuracy=test)  # fmt: skip


def record(stage, trials):
    return FitRecord(stage=stage, params=trials[0].params, valid_accuracy=0.5, best_epoch=1,
                     epochs=2, trials=len(trials), train_flops=0, eval_flops=0,
                     trial_summaries=trials)  # fmt: skip


def test_only_whole_grids_with_test_accuracies_are_kept_in_grid_order():
    whole = record("final", [trial(1, 0.1, [0.1, 0.4], 0.5), trial(0, 0.01, [0.1, 0.3], 0.6)])
    pruned = record("step1", [trial(0, 0.1, [0.1, 0.4], 0.5),
                              trial(1, 0.01, [0.1], None, "PRUNED")])  # fmt: skip
    single = record("head", [trial(0, 0.1, [0.1, 0.4], 0.5)])
    [fit] = grid_fits("run", "job", [whole, pruned, single])
    assert fit.stage == "final" and fit.params == [{"lr": 0.01}, {"lr": 0.1}]
    assert fit.tests == [0.6, 0.5] and fit.selected == 1 and fit.epochs == 2


FIT = GridFit(
    "run", "job", "final",
    [{"lr": 0.1}, {"lr": 0.1}, {"lr": 0.01}, {"lr": 0.01}],
    [[0.1, 0.5, 0.5, 0.5, 0.5],  # fast, flat
     [0.1, 0.4, 0.45, 0.5, 0.55],
     [0.1, 0.2, 0.3, 0.6, 0.7],  # slow, the best
     [0.1, 0.2, 0.25, 0.3, 0.3]],
    [0.50, 0.54, 0.56, 0.40],
)  # fmt: skip


def test_a_policy_that_prunes_the_slow_starter_fails_on_test_and_the_guard_rescues_it():
    greedy = judge(FIT, Policy(first=1, eta=4), max_epochs=4)
    assert not greedy.success and greedy.test == 0.50  # only the fast one went on
    assert greedy.spent == 1 + 1 + 1 + 4 and greedy.spend == 7 / 16
    guarded = judge(FIT, Policy(first=1, eta=4, guard="lr"), max_epochs=4)
    # rung 1: the fast one and lr 0.01's best (a tie of 0.2: the earlier point, 2) go on
    assert guarded.success and guarded.test == 0.56 and guarded.spent == 4 + 1 + 4 + 1
    close = GridFit(*[getattr(FIT, n) for n in ("run", "owner", "stage", "params", "curves")],
                    [0.551, 0.54, 0.56, 0.40])  # fmt: skip
    assert judge(close, Policy(first=1, eta=4), max_epochs=4).success  # within 0.01


def test_the_previous_steps_winner_is_found_in_its_chain_and_kept_through_every_rung():
    """A chain's step 2 knows step 1's selection (its fixed learning rate aside), the final step
    the last step's; a fit of no chain or of another run knows nothing. Kept, the slow best
    point survives the greedy policy that pruned it."""

    def step(run, stage, lrs, curves, tests=None):
        params = [{"lr": lr, "wd": wd} for lr, wd in lrs]
        return GridFit(run, "state", stage, params, curves, tests or [0.5] * len(params))

    step1 = step("a", "none/step1", [(0.1, 0.0), (0.1, 0.1)], [[0.1, 0.2], [0.1, 0.3]])
    step2 = step("a", "none/step2", [(0.05, 0.0), (0.05, 0.1)], [[0.1, 0.2], [0.1, 0.1]])
    final = step("a", "none/final", [(0.1, 0.0), (0.1, 0.1)], [[0.1, 0.2], [0.1, 0.1]])
    other = step("b", "none/step2", [(0.05, 0.0), (0.05, 0.1)], [[0.1, 0.2], [0.1, 0.1]])
    known = known_orders([final, step2, step1, other, FIT])
    assert known == {("a", "state", "none/step2"): 1, ("a", "state", "none/final"): 0}
    # FIT: the greedy policy drops point 2, the test's best; known as the winner, it is kept
    kept = judge(FIT, Policy(first=1, eta=4, known=True), max_epochs=4, known=2)
    assert kept.success and kept.test == 0.56 and kept.spent == 4 + 1 + 4 + 1
    assert judge(FIT, Policy(first=1, eta=4), max_epochs=4, known=2).test == 0.50  # not asked


def test_a_policy_is_parsed_from_its_flag_or_refused_in_one_line():
    assert parse_policy("3,2") == Policy(3, 2)
    assert parse_policy("3, 2, lr") == Policy(3, 2, "lr")
    assert parse_policy("3,2,known") == Policy(3, 2, None, True)
    assert parse_policy("1,4,lr,known") == Policy(1, 4, "lr", True)
    for bad in ("3", "0,2", "3,1", "3,2,lr,dropout", "a,b", "3,2,,known"):
        with pytest.raises(Seq2FinalError, match=r"valid: FIRST,ETA\[,GUARD\]\[,known\]"):
            parse_policy(bad)


def test_the_lower_bound_is_clopper_pearsons():
    assert lower_bound(60, 60) == pytest.approx(0.05 ** (1 / 60))
    assert lower_bound(0, 10) == 0.0
    bound = lower_bound(57, 60)  # the p at which 57 or more of 60 has a 5 % chance
    tail = sum(math.comb(60, k) * bound**k * (1 - bound) ** (60 - k) for k in range(57, 61))
    assert tail == pytest.approx(0.05) and 0.87 < bound < 0.88


def test_summaries_per_grid_size_and_the_noise_floor():
    small = GridFit("run", "job", "joint", [{"lr": 0.1}] * 2, [[0.1, 0.5], [0.1, 0.6]], [0.5, 0.4])
    judged = [judge(FIT, Policy(1, 4), 4), judge(small, Policy(1, 4), 4)]
    rows = {row["grid"]: row for row in summarize(judged)}
    assert list(rows) == ["2 points", "4 points", "all"]
    assert rows["all"]["fits"] == 2 and rows["all"]["successes"] == 1
    assert rows["all"]["spend_pooled"] == pytest.approx((7 + 2) / (16 + 2))
    other = GridFit("run", "job", "final", FIT.params, FIT.curves[::-1], FIT.tests[::-1])
    floor = noise_floor([FIT, small], {("run", "job", "final"): other})
    assert floor["fits"] == 1 and floor["successes"] == 1  # its choice tests the same
