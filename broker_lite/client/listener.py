"""What a push consumer's listener returns, and how it is called.

A listener is ``fn(message) -> ConsumeResult`` (or ``fn(messages)`` with
``consume_batch_size > 1``), a plain function or a coroutine function.
``SUCCESS`` acks the message(s); ``RECONSUME_LATER`` sends them back for a
later retry. As in RocketMQ, an exception counts as ``RECONSUME_LATER``, and
so does returning ``None`` (logged as a warning): a listener must say it
succeeded.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
from collections.abc import Callable
from enum import Enum
from typing import Any

from broker_lite.client.message import ReceivedMessage

__all__ = ["ConsumeFrom", "ConsumeResult", "MessageListener", "call_listener"]

log = logging.getLogger("broker_lite.client.consumer")

#: ``fn(message)`` or, with ``consume_batch_size > 1``, ``fn(list_of_messages)``
MessageListener = Callable[[Any], Any]


class ConsumeResult(Enum):
    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"
    #: RocketMQ's names, as aliases
    CONSUME_SUCCESS = "CONSUME_SUCCESS"


class ConsumeFrom(Enum):
    """Where a group starts on a queue it has never committed on."""

    #: the queue's smallest stored offset (every message still stored)
    FIRST_OFFSET = "first"
    #: the queue's end (only messages sent from now on)
    LAST_OFFSET = "last"


def _outcome(value: object, messages: list[ReceivedMessage]) -> ConsumeResult:
    if isinstance(value, ConsumeResult):
        return value
    first = messages[0].msg_id if messages else "?"
    if value is None:
        log.warning("listener returned None for message %s: counted as RECONSUME_LATER "
                    "(return ConsumeResult.SUCCESS to ack)", first)
    else:
        log.warning("listener returned %r for message %s, not a ConsumeResult: counted as "
                    "RECONSUME_LATER", value, first)
    return ConsumeResult.RECONSUME_LATER


def _run_sync(listener: MessageListener, arg: object,
              messages: list[ReceivedMessage]) -> ConsumeResult:
    try:
        value = listener(arg)
    except Exception:
        log.exception("listener failed on message %s: RECONSUME_LATER",
                      messages[0].msg_id if messages else "?")
        return ConsumeResult.RECONSUME_LATER
    return _outcome(value, messages)


async def call_listener(listener: MessageListener, messages: list[ReceivedMessage], *,
                        batch: bool, executor: concurrent.futures.Executor,
                        slots: asyncio.Semaphore) -> ConsumeResult:
    """Run the listener on ``messages``: coroutines on the loop, functions on ``executor``."""
    arg: object = messages if batch else messages[0]
    if inspect.iscoroutinefunction(listener):
        async with slots:
            try:
                value = await listener(arg)
            except Exception:
                log.exception("listener failed on message %s: RECONSUME_LATER",
                              messages[0].msg_id)
                return ConsumeResult.RECONSUME_LATER
        return _outcome(value, messages)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(executor, _run_sync, listener, arg, messages)
