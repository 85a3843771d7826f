"""`make bench` prints the handover against issue 37's goal (median <= 2 ms, p99 <= 10 ms)."""
from bench import overhead


def test_the_handover_line_says_whether_the_goal_is_met():
    met = overhead.handover_goal({"handover_ms_median": 1.5, "handover_ms_p99": 9.0, "handovers": 8})
    assert met == "handover: median 1.50 ms, p99 9.00 ms over 8 (goal <= 2 / <= 10 ms): met"
    assert overhead.handover_goal({"handover_ms_median": 1.5, "handover_ms_p99": 11.0,
                                   "handovers": 8}).endswith("not met")
    assert overhead.handover_goal({"handover_ms_median": 2.5, "handover_ms_p99": 3.0,
                                   "handovers": 8}).endswith("not met")
