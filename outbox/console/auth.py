"""Who may use the console, and who did each write.

On loopback with no ``--token`` and no ACL keys every request is let in (as on
a laptop, the person at the machine). Bound elsewhere, or with a token, or
holding the broker's ACL keys (an account that may replay, resend and reset
offsets: the console must not lend it to every local user), each request must
carry credentials, or it gets 401 with a Basic challenge, so a browser asks:

* HTTP Basic: any user name and the token as the password, or the broker's
  ACL access key and secret key as user name and password;
* ``Authorization: Bearer TOKEN`` (scripts).

Comparisons are constant-time. Every write form also carries a CSRF token,
an HMAC of the browser's session id (:mod:`outbox.console.guard` sets the
session cookie) under a per-process secret, checked on POST: a token is good
for one session only, so a token seen in one browser is refused in another.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from outbox.console.config import ConsoleConfig, is_loopback

__all__ = ["CredentialGate", "csrf_token", "csrf_valid", "who"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_SECRET = secrets.token_bytes(32)


def csrf_token(session: str) -> str:
    """The CSRF token of the write forms of ``session`` (the session cookie's value)."""
    return hmac.new(_SECRET, b"rocketbox-console-csrf\n" + session.encode(),
                    hashlib.sha256).hexdigest()


def csrf_valid(value: str | None, session: str) -> bool:
    return bool(value) and bool(session) and hmac.compare_digest(
        (value or "").encode(), csrf_token(session).encode())


def _same(given: str, wanted: str | None) -> bool:
    return wanted is not None and hmac.compare_digest(given.encode(), wanted.encode())


def _user(config: ConsoleConfig, authorization: str) -> str | None:
    """The user name the credentials in ``authorization`` prove, or ``None``."""
    scheme, _, value = authorization.partition(" ")
    scheme = scheme.lower()
    if scheme == "bearer":
        return "token" if _same(value.strip(), config.token) else None
    if scheme != "basic":
        return None
    try:
        user, _, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    if config.token and _same(password, config.token):
        return user or "token"
    if config.access_key and _same(user, config.access_key) \
            and _same(password, config.secret_key):
        return user
    return None


def who(scope: Scope) -> str:
    """``user@address`` of a request, for the log line of each write."""
    client = scope.get("client") or ("?", 0)
    user = scope.get("state", {}).get("console_user") or "anonymous"
    return f"{user}@{client[0]}"


class CredentialGate:
    """ASGI middleware: 401 unless the request carries credentials (when they are needed)."""

    def __init__(self, app: ASGIApp, config: ConsoleConfig) -> None:
        self.app = app
        self.config = config
        self.required = (bool(config.token) or bool(config.access_key)
                         or not is_loopback(config.host))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        authorization = headers.get(b"authorization", b"").decode("latin-1")
        user = _user(self.config, authorization) if authorization else None
        if self.required and user is None:
            await send({"type": "http.response.start", "status": 401, "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"www-authenticate", b'Basic realm="rocketbox console"')]})
            await send({"type": "http.response.body",
                        "body": b"401: this console needs credentials (the token, or the "
                                b"broker's ACL access key and secret key)\n"})
            return
        scope.setdefault("state", {})["console_user"] = user
        await self.app(scope, receive, send)
