"""The console's connection to the broker, which may be down when it starts or later.

An operator opens the console exactly when something is wrong, so a broker
that is down must not stop it: :class:`BrokerLink` connects on first use, not at
start-up, and tries again (at most every ``retry_seconds``) when the last try
failed. Until it connects, :meth:`BrokerLink.admin` raises
:class:`~outbox.errors.BrokerUnreachableError` at once with the last error,
which the pages show as an outage (503) while the outbox pages keep working
from the database.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from broker_lite.client import Admin
from broker_lite.errors import BrokerError
from outbox.errors import BrokerUnreachableError
from outbox.targets.address import redacted_address

__all__ = ["BrokerLink", "broker_down"]


def broker_down(address: str, reason: str) -> BrokerUnreachableError:
    """The error a page gets while the broker at ``address`` cannot be reached."""
    shown = redacted_address(address)
    return BrokerUnreachableError(f"broker {shown} is unreachable: {reason}", server=shown)


class BrokerLink:
    """A started :class:`Admin` when the broker can be reached; BrokerUnreachableError if not."""

    def __init__(self, address: str, make: Callable[[], Admin], *,
                 given: Admin | None = None, retry_seconds: float = 2.0) -> None:
        self.address = address
        self._make = make
        self._admin = given
        self._owned = given is None
        self._retry = retry_seconds
        self._lock = threading.Lock()
        self._failed_at: float | None = None
        self._reason = ""

    def admin(self) -> Admin:
        """The connected admin client; raises BrokerUnreachableError when there is none.

        One caller at a time tries to connect (that can take the client's request
        timeout); the others are answered at once with the last error meanwhile.
        """
        admin = self._admin
        if admin is not None:
            return admin
        if not self._lock.acquire(blocking=False):
            raise broker_down(self.address, self._reason or "connecting")
        try:
            if self._admin is not None:
                return self._admin
            now = time.monotonic()
            if self._failed_at is not None and now - self._failed_at < self._retry:
                raise broker_down(self.address, self._reason)
            client = self._make()
            try:
                client.start()
            except (BrokerError, OSError) as exc:
                self._failed_at = time.monotonic()
                self._reason = f"{type(exc).__name__}: {exc}"
                raise broker_down(self.address, self._reason) from None
            self._admin, self._failed_at = client, None
            return client
        finally:
            self._lock.release()

    @property
    def connected(self) -> bool:
        return self._admin is not None

    def close(self) -> None:
        with self._lock:  # waits for a connection attempt in flight
            admin, self._admin = self._admin, None
        if admin is not None and self._owned:
            admin.shutdown()
