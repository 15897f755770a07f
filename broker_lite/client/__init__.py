"""broker_lite's client, on the native protocol: sync, and asyncio.

Producers and consumers::

    from broker_lite.client import Message, Producer, PushConsumer, ConsumeResult

    with Producer("orders-producer", "127.0.0.1:10911") as producer:
        result = producer.send(Message("Orders", b"...", tags="created", keys="order-42"))

    def handle(msg):
        print(msg.topic, msg.body, msg.dedupe_key)
        return ConsumeResult.SUCCESS

    consumer = PushConsumer("billing", "127.0.0.1:10911", listener=handle)
    consumer.subscribe("Orders", "created")
    consumer.start()

Transactions (RocketMQ's seed API): :class:`TransactionProducer` with a
:class:`TransactionListener`. A relay that ends transactions it did not
start uses ``AsyncProducer.send_halves()`` and ``end_transactions()``
(one outcome per item). Every sync class has an asyncio twin
(``AsyncProducer``, ``AsyncTransactionProducer``, ``AsyncPushConsumer``,
``AsyncPullConsumer``, ``AsyncAdmin``); a sync client runs its own event loop
in a background thread, which ``shutdown()`` (or leaving the ``with`` block)
stops.

Errors are :mod:`broker_lite.errors`' tree (the broker's own classes, with
``retriable``), plus :mod:`broker_lite.client.errors`.
"""

from __future__ import annotations

from broker_lite.client.admin import Admin, AsyncAdmin, TopicInfo
from broker_lite.client.config import DEFAULT_SERVER, ClientConfig
from broker_lite.client.errors import BatchSendError, BrokerUnavailableError, ClientClosedError
from broker_lite.client.listener import ConsumeFrom, ConsumeResult, MessageListener
from broker_lite.client.message import (
    Message,
    ReceivedMessage,
    SendResult,
    SendStatus,
    dlq_topic,
    retry_topic,
)
from broker_lite.client.producer import AsyncProducer, Producer
from broker_lite.client.pull_consumer import AsyncPullConsumer, PullConsumer, PullResult
from broker_lite.client.push_consumer import AsyncPushConsumer, PushConsumer
from broker_lite.client.transaction import AsyncTransactionProducer, TransactionProducer
from broker_lite.client.transaction_types import (
    AsyncTransactionListener,
    LocalTransactionState,
    TransactionEnd,
    TransactionEndResult,
    TransactionListener,
    TransactionSendResult,
)

#: RocketMQ 5's name for a received message
MessageView = ReceivedMessage

__all__ = [
    "DEFAULT_SERVER",
    "Admin",
    "AsyncAdmin",
    "AsyncProducer",
    "AsyncPullConsumer",
    "AsyncPushConsumer",
    "AsyncTransactionListener",
    "AsyncTransactionProducer",
    "BatchSendError",
    "BrokerUnavailableError",
    "ClientClosedError",
    "ClientConfig",
    "ConsumeFrom",
    "ConsumeResult",
    "LocalTransactionState",
    "Message",
    "MessageListener",
    "MessageView",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PushConsumer",
    "ReceivedMessage",
    "SendResult",
    "SendStatus",
    "TopicInfo",
    "TransactionEnd",
    "TransactionEndResult",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
    "dlq_topic",
    "retry_topic",
]
