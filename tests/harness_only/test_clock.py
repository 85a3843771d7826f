import pytest

from harness import clock as clock_mod
from harness.clock import Clock

pytestmark = pytest.mark.harness     # numpy and tqdm only: runs under numpy 1.23.5 too


class FakeTime:
    def __init__(self):
        self.t = 100.0
        self.reads = 0

    def __call__(self):
        self.reads += 1
        return self.t

    def advance(self, dt):
        self.t += dt


def make_clock():
    now = FakeTime()
    syncs = []
    clock = Clock(sync=lambda: syncs.append(now.reads), now=now, wall=lambda: 1_700_000_000.0)
    return clock, now, syncs


def test_spans_add_up_to_wall_time_and_eval_checkpoint_are_excluded():
    clock, now, _ = make_clock()
    clock.start()
    for span, dt in [("init", 2.0), ("harness", 0.01), ("train", 10.0), ("eval", 3.0),
                     ("harness", 0.01), ("train", 9.5), ("eval", 2.5), ("checkpoint", 1.0)]:
        now.advance(dt)
        clock.lap(span)
    assert clock.elapsed() == pytest.approx(28.02)
    assert sum(clock.totals.values()) == pytest.approx(clock.elapsed())
    assert clock.totals["train"] == pytest.approx(19.5)
    assert clock.on_clock() == pytest.approx(28.02 - 3.0 - 2.5 - 1.0)
    # laps are contiguous: each starts where the previous one ended
    ends = [end for _, _, end in clock.laps]
    starts = [start for _, start, _ in clock.laps]
    assert starts[1:] == ends[:-1] and starts[0] == 0.0


def test_a_task_with_its_eval_on_the_clock_counts_its_eval_laps_and_never_its_checkpoints():
    """tasks.toml's eval_on_clock (MLPerf's rule): the excluded set is the task's, made with the clock; the
    default is DAWNBench's, eval and checkpoint off."""
    laps = [("init", 2.0), ("train", 10.0), ("eval", 3.0), ("harness", 0.5), ("train", 9.5), ("eval", 2.5),
            ("checkpoint", 1.0)]
    readings = {}
    for on in (False, True):
        now = FakeTime()
        clock = Clock(now=now, wall=lambda: 0.0, excluded=clock_mod.excluded(on))
        clock.start()
        for span, dt in laps:
            now.advance(dt)
            clock.lap(span)
        readings[on] = (clock.on_clock(), clock.eval_on_clock)
    assert readings[False] == (pytest.approx(28.5 - 3.0 - 2.5 - 1.0), False)
    assert readings[True] == (pytest.approx(28.5 - 1.0), True)      # both eval laps counted, the checkpoint not
    assert clock_mod.excluded(False) == clock_mod.EXCLUDED == frozenset({"eval", "checkpoint"})
    assert Clock().excluded == clock_mod.EXCLUDED and not Clock().eval_on_clock
    with pytest.raises(ValueError, match="unknown span 'evals'"):
        Clock(excluded=frozenset({"evals"}))


def test_device_is_synchronized_before_every_reading():
    clock, now, syncs = make_clock()
    clock.start()
    now.advance(1.0)
    clock.lap("train")
    clock.read()
    # one sync per reading, each one before the time source is read
    assert len(syncs) == 3 == now.reads
    assert syncs == [0, 1, 2]


def test_on_clock_counts_only_what_has_been_lapped():
    clock, now, _ = make_clock()
    clock.start()
    now.advance(5.0)
    clock.lap("train")
    now.advance(7.0)          # in progress, not yet attributed
    assert clock.on_clock() == pytest.approx(5.0)
    assert clock.read() == pytest.approx(12.0)


def test_unknown_span_is_refused():
    clock, _, _ = make_clock()
    clock.start()
    with pytest.raises(ValueError, match="unknown span"):
        clock.lap("coffee")


def test_wall_ms_maps_readings_to_unix_time():
    clock, now, _ = make_clock()
    clock.start()
    assert clock.wall_ms(1.5) == 1_700_000_001_500
