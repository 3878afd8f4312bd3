"""The relay's partitioner against aiokafka's: the same partition for every key, so a
stream's messages go where Kafka's default partitioner (and every client using it) puts
them, whichever publisher sent them."""

from __future__ import annotations

from aiokafka.partitioner import DefaultPartitioner
from aiokafka.partitioner import murmur2 as kafka_murmur2
from hypothesis import given, settings
from hypothesis import strategies as st

from muster.bus.partition import murmur2, partition_of
from tests.property.test_core_properties import SETTINGS


@settings(SETTINGS, max_examples=500)
@given(st.binary(max_size=200))
def test_murmur2_is_kafkas(key: bytes) -> None:
    assert murmur2(key) == kafka_murmur2(key)


@settings(SETTINGS, max_examples=300)
@given(
    st.one_of(
        st.binary(max_size=80),
        st.from_regex(r"(workload|node|provisioning|admission)-[0-9a-f]{1,24}", fullmatch=True).map(
            str.encode
        ),
    ),
    st.lists(st.integers(0, 1000), min_size=1, max_size=12, unique=True).map(sorted),
)
def test_partition_is_the_default_partitioners(key: bytes, partitions: list[int]) -> None:
    assert partition_of(key, partitions) == DefaultPartitioner()(key, partitions, partitions)


def test_known_values() -> None:
    """Values of the Java client's murmur2 (kafka-clients UtilsTest), as unsigned."""
    assert murmur2(b"21") == -973932308 & 0xFFFFFFFF
    assert murmur2(b"foobar") == -790332482 & 0xFFFFFFFF
    assert murmur2(b"a-little-bit-long-string") == -985981536 & 0xFFFFFFFF
    assert murmur2(b"a-little-bit-longer-string") == -1486304829 & 0xFFFFFFFF
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971 & 0xFFFFFFFF
    assert murmur2(b"abc") == 479470107
