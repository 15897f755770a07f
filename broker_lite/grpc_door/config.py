"""Settings of the gRPC door: a frozen dataclass the CLI builds from ``--grpc-*`` flags.

The defaults are the RocketMQ 5 proxy's (``ProxyConfig``), except the smallest
invisible duration a receive may ask for: the proxy refuses less than 10 s,
broker_lite accepts 1 s so tests and short jobs need not wait.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker_lite.errors import ConfigurationError

__all__ = ["GrpcDoorConfig"]


@dataclass(frozen=True, slots=True, kw_only=True)
class GrpcDoorConfig:
    """What the gRPC door needs beyond the broker's and the server's configs."""

    #: accepted distance of a request's ``x-mq-date-time`` from the broker's clock;
    #: ``None``: the ACL file's ``clock_skew_seconds``
    clock_skew_seconds: float | None = None
    #: deliveries of a message before it goes to ``%DLQ%group`` (16 retries + 1)
    max_delivery_attempts: int = 17
    #: the invisible duration of an auto-renewed receive (push consumers), renewed
    #: while the client is connected
    auto_renew_invisible_seconds: float = 60.0
    #: an auto-renewed message is held for a connected client at most this long
    auto_renew_max_seconds: float = 3 * 3600.0
    #: a message held for a client that went away becomes visible after this long
    invisible_when_client_gone_seconds: float = 1.0
    #: how often the broker expires in-flight messages, moves those that used their last
    #: delivery to the DLQ and saves what is in flight (``pop.json``), polled or not
    revive_interval_seconds: float = 1.0
    #: the largest invisible duration a receive or ChangeInvisibleDuration may ask for
    max_invisible_seconds: float = 12 * 3600.0
    #: long polling of a receive is capped here; push consumers are told this value
    max_long_polling_seconds: float = 20.0
    #: most messages one receive returns; push consumers are told this value
    receive_batch_size: int = 32
    #: messages read ahead per queue and group while FIFO message groups wait
    max_read_ahead: int = 1024
    #: a DELAY message may not be due later than this from now
    max_delay_seconds: float = 24 * 3600.0
    #: the producer's send attempts, told to producers in their settings
    producer_max_attempts: int = 3
    #: user properties of one message, and their total size in bytes (keys + values)
    max_user_properties: int = 128
    max_user_properties_bytes: int = 16 * 1024
    #: behave as Apache RocketMQ 5's proxy where broker_lite is kinder (transaction data
    #: in memory with a window, EndTransaction answered on hand-off, no half
    #: de-duplication, no transactional batch, the topic's message.type enforced);
    #: docs/grpc-proxy-semantics.md
    proxy_semantics: bool = False
    #: proxy mode: how long the door keeps a half's transaction data for its
    #: EndTransaction (the proxy's ``transactionDataExpireMillis``)
    transaction_data_expire_seconds: float = 30.0
    #: proxy mode: transaction data kept per ``topic@transactionId`` (the proxy's
    #: ``transactionDataMaxNum``); the oldest goes first
    transaction_data_max_num: int = 15

    def __post_init__(self) -> None:
        if self.clock_skew_seconds is not None and self.clock_skew_seconds <= 0:
            raise ConfigurationError(
                f"clock_skew_seconds must be positive, got {self.clock_skew_seconds}",
                setting="clock_skew_seconds")
        if self.max_delivery_attempts < 1:
            raise ConfigurationError(
                f"max_delivery_attempts must be at least 1, got {self.max_delivery_attempts}",
                setting="max_delivery_attempts")
        if min(self.auto_renew_invisible_seconds, self.max_invisible_seconds,
               self.max_long_polling_seconds, self.max_delay_seconds,
               self.revive_interval_seconds) <= 0:
            raise ConfigurationError(
                "invisible, long-polling, delay and revive intervals must be positive",
                setting="auto_renew_invisible_seconds, max_invisible_seconds, "
                        "max_long_polling_seconds, max_delay_seconds, revive_interval_seconds")
        if self.invisible_when_client_gone_seconds < 0 or self.auto_renew_max_seconds < 0:
            raise ConfigurationError(
                "invisible_when_client_gone_seconds and auto_renew_max_seconds "
                "must not be negative",
                setting="invisible_when_client_gone_seconds, auto_renew_max_seconds")
        if self.receive_batch_size < 1 or self.max_read_ahead < self.receive_batch_size:
            raise ConfigurationError(
                "receive_batch_size >= 1 and max_read_ahead >= receive_batch_size",
                setting="receive_batch_size, max_read_ahead")
        if self.producer_max_attempts < 1:
            raise ConfigurationError("producer_max_attempts must be at least 1",
                                     setting="producer_max_attempts")
        if self.transaction_data_expire_seconds <= 0:
            raise ConfigurationError("transaction_data_expire_seconds must be positive, got "
                                     f"{self.transaction_data_expire_seconds}",
                                     setting="transaction_data_expire_seconds")
        if self.transaction_data_max_num < 1:
            raise ConfigurationError("transaction_data_max_num must be at least 1, got "
                                     f"{self.transaction_data_max_num}",
                                     setting="transaction_data_max_num")
