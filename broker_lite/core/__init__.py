"""The broker core: topics, consumer groups, delays, retries and transactions.

It sits on :mod:`broker_lite.storage` and under the protocol doors; it does no
network I/O of its own.
"""

from __future__ import annotations

from broker_lite.core import model
from broker_lite.core.broker import Broker
from broker_lite.core.clients import Channel
from broker_lite.core.config import BrokerConfig
from broker_lite.core.ids import new_msg_id
from broker_lite.core.model import Ended, Sent

__all__ = ["Broker", "BrokerConfig", "Channel", "Ended", "Sent", "model", "new_msg_id"]
