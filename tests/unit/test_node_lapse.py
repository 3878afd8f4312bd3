"""The heartbeat watch's rule: silent past the grace period, counted from the last beat
or from when the node came under watch, whichever is later."""

from muster.core.nodes.lapse import Hearing, Watch


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


def test_hearing_counts_to_the_latest_probe_back_on_every_partition() -> None:
    h = Hearing()
    assert h.through() is None  # partitions unknown yet
    h.partitions = frozenset({0, 1, 2})
    h.back(0, 10.0)
    h.back(1, 11.0)
    assert h.through() is None  # partition 2 not heard yet: nothing is known
    h.back(2, 12.0)
    assert h.through() == 10.0
    h.back(0, 13.0)
    h.back(0, 9.0)  # an older probe read late
    assert h.through() == 11.0


def test_a_watch_that_stops_hearing_declares_no_one_lost() -> None:
    """The consumer stalls for three seconds (grace 2): every node's silence is frozen at
    the last probe heard, not grown by the wall clock. When the backlog arrives, only the
    node whose agent really stopped beating lapses."""
    w = Watch(grace=2.0, interval=0.3)
    h = Hearing(partitions=frozenset({0}))
    w.lapsed(["a", "b"], now=0.0)
    w.beat("a", 10.0, "agent-0")
    w.beat("b", 10.0, "agent-1")
    h.back(0, 10.0)
    # Nothing read from 10.0 to 13.0: by the wall clock both nodes are 3 s silent.
    assert w.lapsed(["a", "b"], now=13.0) == ["a", "b"]
    through = h.through()
    assert through is not None and w.lapsed(["a", "b"], now=through) == []
    # The backlog: agent-1 beat all along (received now), agent-0 died at 10.0.
    w.beat("b", 13.0, "agent-1")
    h.back(0, 12.9)
    through = h.through()
    assert through is not None and w.lapsed(["a", "b"], now=through) == ["a"]
