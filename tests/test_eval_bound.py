"""harness/eval_bound.py: the bound of an eval span, as docs/RULES.md ("The eval span") writes it."""
import pytest

from harness.eval_bound import PER_EVAL_S, EvalBound


def test_the_bound_is_the_eval_share_of_the_train_span_plus_the_allowance():
    bound = EvalBound.of(train_s=60.0, eval_examples=10_000, train_examples=60_000)
    assert bound.seconds == pytest.approx(10.0 + PER_EVAL_S)
    assert bound.formula == "10000 eval / 60000 training examples x 60.00 s train span + 5 s"


def test_the_bound_takes_no_count_from_the_trainer():
    """Issue 33: a trainer that said it trained on 1 example made the bound thousands of seconds. The
    bound's denominator is the task's training set (tasks.toml); there is no parameter a trainer's
    `samples` could reach."""
    import inspect

    from harness.tasks import get_task
    assert "samples" not in inspect.signature(EvalBound.of).parameters
    task = get_task("fashion-mnist")
    bound = EvalBound.of(train_s=16.12, eval_examples=task.eval_examples, train_examples=task.train_examples)
    assert bound.seconds == pytest.approx(10_000 / 60_000 * 16.12 + PER_EVAL_S)
    assert bound.seconds < 10       # with `samples: 1` the old formula gave 10000 x 16.12 s + 5 s


def test_the_predictor_start_and_the_ranks_show_in_the_formula():
    started = EvalBound.of(train_s=60.0, eval_examples=10_000, train_examples=60_000, start_s=3.0)
    assert started.seconds == pytest.approx(10.0 + PER_EVAL_S + 3.0)
    assert "3.00 s for the predictor's start" in started.formula
    # two ranks each train half the set in the span: an example cost two ranks' spans / 60000
    split = EvalBound.of(train_s=60.0, eval_examples=10_000, train_examples=60_000, rank_train_s=(60.0, 60.0))
    assert split.seconds == pytest.approx(20.0 + PER_EVAL_S)
    assert "(60.00 + 60.00) s train spans of 2 ranks" in split.formula


def test_one_rank_training_everything_gets_no_more_than_one_process():
    """Issue 46, attack 9: the bound took rank 0's span as the cost of its share N/ranks, so with rank 0
    training the whole set and rank 1 returning at once each eval's allowance doubled (W ranks: W times).
    It is every rank's span now: the same allowance as one process that trained the set in that span."""
    alone = EvalBound.of(train_s=60.0, eval_examples=10_000, train_examples=60_000)
    lopsided = EvalBound.of(train_s=60.0, eval_examples=10_000, train_examples=60_000, rank_train_s=(60.0, 0.01))
    assert lopsided.seconds == pytest.approx(alone.seconds, abs=0.01)
    four = EvalBound.of(train_s=60.0, eval_examples=10_000, train_examples=60_000, rank_train_s=(60.0, 0, 0, 0))
    assert four.seconds == pytest.approx(alone.seconds)


def test_the_task_s_eval_passes_multiply_the_share_and_show_in_the_formula():
    bound = EvalBound.of(train_s=50.0, eval_examples=10_000, train_examples=50_000, passes=5)
    assert bound.seconds == pytest.approx(5 * 10.0 + PER_EVAL_S)
    assert bound.formula.startswith("5 passes x 10000 eval / 50000 training examples")


def test_the_passes_are_the_task_s_never_a_reference_s(tmp_path):
    """Issue 33: nothing an entrant controls sets a bound. CIFAR-10 allows the frontier's 6-view TTA
    (5 passes) to every entry alike; reference.toml's [budget] eval_passes (it raised the bound up to
    8x at c855ded) is refused in one line."""
    from harness import registry
    from harness.errors import UsageError
    from harness.tasks import TASKS
    assert TASKS["cifar10"].eval_passes == 5 and TASKS["fashion-mnist"].eval_passes == 1
    assert TASKS["imagenet"].eval_passes == 1 and TASKS["squad"].eval_passes == 1
    assert registry.load_spec("cifar10-fast-pytorch").hyperparameters["tta_level"] == 2
    folder = tmp_path / "raised"
    folder.mkdir()
    (folder / "train.py").write_text("")
    (folder / "reference.toml").write_text('task = "fashion-mnist"\nframework = "numpy"\nmodel = "m"\n'
                                           'entry = "train:R"\n[budget]\neval_passes = 8\n')
    with pytest.raises(UsageError, match="'budget.eval_passes' is not a reference's to set"):
        registry.load_spec("raised", tmp_path)
