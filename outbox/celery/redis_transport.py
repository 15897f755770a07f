"""kombu's Redis transport, with a channel that survives its connection being collected.

When Redis dies under a worker, Celery's consumer calls kombu's
``Connection.collect()`` and then ``Connection.close()``. ``collect()``
closes the default channel, then every channel of the transport, and then
detaches the transport from the connection (``transport.client = None``).
Two things make that go wrong (kombu 5.7, reproduced in
``tests/outbox/celery/test_outbox_celery_redis_restart.py``):

1. the default channel was waiting on a ``BRPOP`` (a free worker slot), so
   its first close reads the dead socket, raises a connection error (which
   ``collect()`` ignores) and leaves the channel open;
2. closing another channel of the connection (Celery's remote-control
   ``pidbox``, whose auto-delete queue is deleted on close) raises a connection
   error too, which stops the loop before it reaches the default channel.

The transport is then detached with the default channel still open and a
task unacknowledged in it. ``Connection.close()`` closes that channel again;
the channel restores its unacknowledged messages, needs a new Redis client
for that, and builds its connection parameters from ``transport.client``,
now None: ``AttributeError: 'NoneType' object has no attribute 'hostname'``.
That is not a connection error, so Celery logs ``Unrecoverable error`` and
stops the worker.

This channel says what actually happened with an error the transport lists
among its connection errors, which Celery handles like any lost connection:
the worker reconnects. The unacknowledged task is not lost: its row is
relayed by the sweeper lane (:mod:`outbox.celery.sweeper`), and with Redis
persistence kombu delivers the task again after ``visibility_timeout``.
:func:`~outbox.celery.app.make_celery` uses this transport for ``redis://``
and ``rediss://`` broker URLs. (Turning Celery's remote control off would
remove the second channel, but also the only one that notices a lost Redis
while all prefetch slots hold tasks whose acks failed: the worker would never
reconnect.)
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError

__all__ = ["TRANSPORT_PATH", "Channel", "Transport", "transport_settings"]

TRANSPORT_PATH = "outbox.celery.redis_transport:Transport"
_SCHEMES = ("redis://", "rediss://")


class Channel(kombu_redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> Any:
        transport = self.connection
        if transport is None or transport.client is None:
            raise RedisConnectionError("this channel's connection to Redis was closed "
                                       "(the worker reconnects with a new one)")
        return super()._connparams(asynchronous=asynchronous)  # type: ignore[no-untyped-call]


class Transport(kombu_redis.Transport):
    Channel = Channel


def transport_settings(broker_url: str) -> dict[str, str]:
    """Celery settings that route a ``redis://`` / ``rediss://`` URL through this transport."""
    if not broker_url.startswith(_SCHEMES):
        return {}
    return {"broker_transport": TRANSPORT_PATH}
