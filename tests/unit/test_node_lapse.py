"""The heartbeat watch's rule: silent past the grace period, counted from the last beat
or from when the node came under watch, whichever is later."""

from muster.core.nodes.lapse import Watch


def test_a_node_is_lost_only_after_a_full_grace_period_of_silence() -> None:
    w = Watch(grace=10.0)
    assert w.lapsed(["a", "b"], now=100.0) == []  # watched from now on
    w.beat("a", 105.0)
    assert w.lapsed(["a", "b"], now=110.0) == []
    assert w.lapsed(["a", "b"], now=110.5) == ["b"]
    assert w.lapsed(["a", "b"], now=115.5) == ["a", "b"]


def test_a_node_that_comes_back_gets_a_fresh_grace_period() -> None:
    w = Watch(grace=10.0)
    w.beat("a", 0.0)
    assert w.lapsed(["a"], now=0.0) == []
    assert w.lapsed(["a"], now=20.0) == ["a"]
    assert w.lapsed([], now=21.0) == []  # declared lost: no longer watched
    assert w.lapsed(["a"], now=50.0) == []  # registered again: watched from 50
    assert w.lapsed(["a"], now=60.5) == ["a"]


def test_beats_never_go_back_in_time() -> None:
    w = Watch(grace=5.0)
    w.lapsed(["a"], now=0.0)
    w.beat("a", 10.0)
    w.beat("a", 3.0)  # a late message
    assert w.last_beat["a"] == 10.0
    assert w.lapsed(["a"], now=14.0) == []


def test_a_node_lapses_with_its_agent() -> None:
    """An agent killed mid-round: a's beat is a round older than b's. When a lapses, b
    (same agent, two rounds silent) goes with it; c (another agent) and d (same agent,
    beating) stay."""
    w = Watch(grace=2.0, interval=0.3)
    w.lapsed(["a", "b", "c", "d"], now=0.0)
    w.beat("a", 10.0, "agent-0")
    w.beat("b", 10.3, "agent-0")
    w.beat("c", 10.3, "agent-1")
    w.beat("d", 12.2, "agent-0")
    assert w.lapsed(["a", "b", "c", "d"], now=12.1) == ["a", "b"]
    # Without the interval, only the per-node rule applies.
    w.interval = None
    assert w.lapsed(["a", "b", "c", "d"], now=12.1) == ["a"]
