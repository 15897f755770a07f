"""Poll a condition until it holds or a deadline passes.

Tests never sleep to wait for something. They either wait on an event or call
:func:`wait_until` with a predicate and a timeout; the short pause between
polls lives here and nowhere else.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["WaitTimeout", "wait_until"]

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """The predicate did not become true before the deadline.

    It is an ``AssertionError`` so that pytest reports it as a plain test
    failure. When the last poll raised one of the ignored exceptions, that
    exception is chained as ``__cause__``.
    """


def wait_until(
    predicate: Callable[[], T],
    *,
    timeout: float = 10.0,
    interval: float = 0.02,
    message: str | Callable[[], str] = "condition was not met",
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Call ``predicate`` until it returns a truthy value, and return that value.

    ``timeout`` is the whole budget in seconds, measured on the monotonic clock.
    ``interval`` is the pause between polls; it grows by half each poll up to
    ten times its start, so a slow condition costs few calls and a quick one
    is seen quickly. The predicate is always called at least once, and once
    more at the deadline.

    Exceptions whose types are listed in ``ignore`` count as "not yet" (a
    refused connection while a server starts, say). Any other exception
    propagates at once, which is how a predicate aborts the wait early, for
    example when the process it waits on has died.

    ``message`` may be a callable, so that costly diagnostics (a log tail) are
    only built on failure.

    Raises:
        WaitTimeout: the deadline passed; the text names ``message`` and the
            time waited.
    """
    if timeout < 0:
        raise ValueError(f"timeout must be >= 0, got {timeout}")
    if interval <= 0:
        raise ValueError(f"interval must be > 0, got {interval}")
    start = time.monotonic()
    deadline = start + timeout
    pause = interval
    last_error: BaseException | None = None
    while True:
        try:
            result = predicate()
        except ignore as exc:
            last_error = exc
        else:
            if result:
                return result
            last_error = None
        now = time.monotonic()
        if now >= deadline:
            break
        time.sleep(min(pause, deadline - now))
        pause = min(pause * 1.5, interval * 10)
    text = message() if callable(message) else message
    waited = time.monotonic() - start
    detail = f"{text} (waited {waited:.2f}s of {timeout:.2f}s)"
    if last_error is not None:
        detail += f"; last error: {type(last_error).__name__}: {last_error}"
    raise WaitTimeout(detail) from last_error
