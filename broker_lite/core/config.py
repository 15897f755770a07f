"""Configuration of the broker core, a frozen dataclass passed by keyword."""

from __future__ import annotations

from dataclasses import dataclass

from broker_lite.errors import ConfigurationError
from broker_lite.storage import StoreConfig

__all__ = ["BrokerConfig"]


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerConfig:
    """Everything the broker core needs; the CLI builds it from flags."""

    store: StoreConfig
    broker_name: str = "broker-lite"
    #: create a topic (with ``default_queues``) on its first send
    auto_create_topics: bool = True
    default_queues: int = 4
    #: answer half-message sends with NO_PERMISSION (RocketMQ's rejectTransactionMessage)
    reject_transactions: bool = False
    #: a half is checked back once it is older than this (seconds, broker store time)
    tx_timeout: float = 6.0
    #: how often the check service runs (seconds)
    tx_check_interval: float = 30.0
    #: checks before a half is discarded to TRANS_CHECK_MAX_TIME_TOPIC
    tx_check_max: int = 15
    #: seconds an op record waits for its batch after an end is applied, as RocketMQ's
    #: ``transactionOpBatchInterval`` (3 s there); 0 (the default): written with the end.
    #: Only the gRPC door's proxy mode sets it (``--tx-op-batch-interval``); with it, each
    #: op record names one copy of its half, as RocketMQ's does (docs/grpc-proxy-semantics.md)
    tx_op_batch_interval: float = 0.0
    #: a half older than this is discarded whatever its check count (RocketMQ: 72 h)
    tx_max_age_hours: float = 72.0
    #: failed deliveries before a message goes to %DLQ%group
    max_reconsume_times: int = 16
    #: multiplies every delay-level duration; tests use e.g. 0.01 (1 s -> 10 ms)
    delay_time_scale: float = 1.0
    #: a client that sent no heartbeat for this long is dropped (seconds)
    client_expiry: float = 120.0

    def __post_init__(self) -> None:
        if self.default_queues < 1 or self.default_queues > 1024:
            raise ConfigurationError(
                f"default_queues must be in [1, 1024], got {self.default_queues}",
                setting="default_queues")
        if self.tx_timeout < 0 or self.tx_check_interval <= 0 or self.tx_check_max < 1:
            raise ConfigurationError("tx_timeout >= 0, tx_check_interval > 0 and tx_check_max >= 1",
                                     setting="tx_timeout, tx_check_interval, tx_check_max")
        if self.tx_op_batch_interval < 0:
            raise ConfigurationError(f"tx_op_batch_interval must be >= 0 seconds, got "
                                     f"{self.tx_op_batch_interval}", setting="tx_op_batch_interval")
        if self.delay_time_scale <= 0:
            raise ConfigurationError("delay_time_scale must be positive",
                                     setting="delay_time_scale")
