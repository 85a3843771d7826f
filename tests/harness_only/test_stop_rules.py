"""The stop rules (harness.stop_rules): when a run ends and how, as a table."""
import pytest

from harness.sandbox import handle
from harness.stop_rules import CONVERGED, DNC, Budget, Outcome, decide, failed
from harness.task_kinds import ImageClassification

pytestmark = pytest.mark.harness     # numpy and tqdm only: runs under numpy 1.23.5 too

BUDGET = Budget(max_epochs=3, max_seconds=100.0, threshold=0.9, metric="top1")
NAN, INF = float("nan"), float("inf")
TIME_SPENT = (DNC, "budget: 100.0 s on the clock >= max_seconds=100")
EPOCHS_SPENT = (DNC, "budget: max_epochs=3 reached without top1 >= 0.9")


@pytest.mark.parametrize("epoch, loss, on_clock, reached, ends", [
    # between training and scoring (reached=None): only a diverged loss ends the run, unscored
    (1, 0.5, 10.0, None, None),
    (1, NAN, 10.0, None, (DNC, "diverged: training loss is nan at epoch 1")),
    (2, INF, 10.0, None, (DNC, "diverged: training loss is inf at epoch 2")),
    (2, -INF, 10.0, None, (DNC, "diverged: training loss is -inf at epoch 2")),
    (3, 0.5, 500.0, None, None),          # spent budgets wait for the score: the last epoch may converge
    # after scoring
    (1, 0.5, 10.0, True, (CONVERGED, "")),
    (3, 0.5, 500.0, True, (CONVERGED, "")),     # reaching the threshold wins over both spent budgets
    (2, NAN, 10.0, True, (DNC, "diverged: training loss is nan at epoch 2")),   # a NaN never converges
    (1, 0.5, 99.999, False, None),
    (1, 0.5, 100.0, False, TIME_SPENT),        # at the budget is over it
    (2, 0.5, 10.0, False, None),
    (3, 0.5, 10.0, False, EPOCHS_SPENT),
    (4, 0.5, 10.0, False, EPOCHS_SPENT),       # past it
    (3, 0.5, 100.0, False, TIME_SPENT),        # both spent: the time budget is the reason
])
def test_the_stop_rules(epoch, loss, on_clock, reached, ends):
    outcome = decide(BUDGET, epoch, loss, on_clock, reached)
    assert (outcome if outcome is None else (outcome.status, outcome.reason)) == ends


@pytest.mark.parametrize("value, threshold, reached", [
    (0.9, 0.9, True), (0.95, 0.9, True), (0.8999999, 0.9, False), (NAN, 0.9, False), (0.0, 0.0, True),
])
def test_reaching_the_threshold(value, threshold, reached):
    assert ImageClassification().reaches(value, threshold) is reached


@pytest.mark.parametrize("exc, reason", [
    (handle.WorkerError("train_epoch() raised RuntimeError: scripted failure"),
     "error: train_epoch() raised RuntimeError: scripted failure"),
    (handle.WorkerDied("the train worker was killed by SIGKILL"), "error: the train worker was killed by SIGKILL"),
    (ValueError("bad"), "error: ValueError: bad"),
    # issue 34: "error: KeyboardInterrupt: " said nothing of what happened
    (KeyboardInterrupt(), "error: interrupted (Ctrl-C, SIGINT)"),
    (RuntimeError(), "error: RuntimeError"),
    (OSError("two\nlines"), "error: OSError: two lines"),
])
def test_a_run_that_raised_is_dnc_with_its_reason(exc, reason):
    assert failed(exc, (handle.WorkerError, handle.WorkerDied)) == Outcome(DNC, reason)


def test_only_a_diverged_outcome_says_so():
    assert decide(BUDGET, 1, NAN, 0.0).diverged
    assert not decide(BUDGET, 3, 0.5, 0.0, False).diverged and not decide(BUDGET, 1, 0.5, 0.0, True).diverged
