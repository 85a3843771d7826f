"""harness/eval_bound.py: the bound of an eval span, as docs/RULES.md ("The eval span") writes it."""
import pytest

from harness.eval_bound import MAX_EVAL_PASSES, PER_EVAL_S, EvalBound


def test_the_bound_is_the_eval_share_of_the_train_span_plus_the_allowance():
    bound = EvalBound.of(train_s=60.0, samples=60_000, eval_examples=10_000, train_examples=60_000)
    assert bound.seconds == pytest.approx(10.0 + PER_EVAL_S)
    assert bound.formula == "10000 eval / 60000 trained examples x 60.00 s train span + 5 s"


def test_claimed_examples_are_capped_at_the_training_set_and_the_first_eval_adds_the_start():
    claimed = EvalBound.of(train_s=60.0, samples=10**9, eval_examples=10_000, train_examples=60_000,
                           first_start_s=3.0)
    assert claimed.seconds == pytest.approx(10.0 + PER_EVAL_S + 3.0)
    assert "3.00 s for the predictor's start" in claimed.formula


def test_declared_eval_passes_multiply_the_share_and_show_in_the_formula():
    bound = EvalBound.of(train_s=50.0, samples=50_000, eval_examples=10_000, train_examples=50_000, passes=5)
    assert bound.seconds == pytest.approx(5 * 10.0 + PER_EVAL_S)
    assert bound.formula.startswith("5 passes x 10000 eval / 50000 trained examples")
    assert MAX_EVAL_PASSES == 8


def test_the_fast_reference_declares_what_its_tta_costs():
    from harness import registry
    spec = registry.load_spec("cifar10-fast-pytorch")
    assert spec.hyperparameters["tta_level"] == 2 and spec.eval_passes == 5
    assert registry.load_spec("fashion-mnist-cnn-pytorch").eval_passes == 1
