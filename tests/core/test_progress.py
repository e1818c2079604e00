"""The console's progress line (gbtrain.progress): the time left from the pace so far, from a resumed step too."""

from gbtrain.progress import Eta, duration


def test_durations_read_at_a_glance():
    assert [duration(s) for s in (0, 42.4, 60, 185, 3599, 3720, -3)] == ["0s", "42s", "1m00s", "3m05s", "59m59s",
                                                                       "1h02m", "0s"]


def test_the_time_left_follows_the_pace_since_the_start():
    now = [100.0]
    eta = Eta(400, clock=lambda: now[0])
    assert eta.line(0) == "step 0/400 (0%) · ? left"
    now[0] = 130.0  # 50 steps in 30 s: 350 more take 210 s
    assert eta.line(50, "loss 2.8805") == "step 50/400 (12%) loss 2.8805 · 3m30s left"
    now[0] = 340.0
    assert eta.line(400).endswith("(100%) · 0s left")


def test_a_resumed_run_counts_from_its_first_step():
    now = [0.0]
    eta = Eta(1000, start=600, clock=lambda: now[0])
    now[0] = 40.0  # 100 steps since the resume in 40 s, not 700
    assert eta.line(700) == "step 700/1000 (70%) · 2m00s left"
