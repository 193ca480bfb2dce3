"""Fixtures of the Cluster and Sentinel tests: a real 3-primary + 3-replica Redis Cluster and a real
Sentinel setup (a primary, a replica, three Sentinels) on loopback, each started once per test module (a
cluster takes a few seconds to form, Sentinels a few more to find each other).

The fault tests change them (a primary killed, a slot migrated, a replica promoted) and put them back in a
healthy state before the next test (a killed node is started again and rejoins as a replica).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from otel_context.testing.redis_server import RedisClusterServers, RedisSentinelServers
from tests.servers import require_binary

from .conftest import require_redis_binary


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisClusterServers]:
    with RedisClusterServers(require_redis_binary()) as servers:
        yield servers


@pytest.fixture(scope="module")
def sentinel() -> Iterator[RedisSentinelServers]:
    require_binary("redis-sentinel", "apt-get install -y --no-install-recommends redis-sentinel")
    with RedisSentinelServers(require_redis_binary()) as servers:
        yield servers
