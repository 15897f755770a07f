"""What a browser is allowed to do with the console: framing, Host, Origin, session.

:class:`BrowserGuard` is ASGI middleware, outside the credential gate, that
applies four rules to every request:

* **No framing.** Every response carries ``X-Frame-Options: DENY`` and
  ``Content-Security-Policy: frame-ancestors 'none'``, so no page of another
  origin (another local port included) can frame a confirmation page and
  trick a click on it.
* **Host allowlist.** The ``Host`` header must name the address the console
  is bound to, ``localhost``, or a name given with ``--allowed-host``. A page
  on ``attacker.example`` whose DNS name is rebound to 127.0.0.1 sends
  ``Host: attacker.example`` and is answered 421. Bound to a wildcard
  (``0.0.0.0``, ``::``), any IP address literal is accepted too: a rebound
  DNS name never arrives as an address literal.
* **Origin on every POST.** A POST must carry an ``Origin`` equal to the
  console's own (``http://`` plus an allowed ``Host``), or it is answered 403.
  Browsers send ``Origin`` on every POST; scripts that do not may use
  ``Authorization: Bearer TOKEN``, which no browser adds by itself.
* **A session per browser.** The first response sets a random session id in
  an ``HttpOnly``, ``SameSite=Strict`` cookie; the CSRF token of the write
  forms is an HMAC of that id (:func:`~outbox.console.auth.csrf_token`), so a
  token taken from one session is refused in another.
"""

from __future__ import annotations

import ipaddress
import re
import secrets
from collections.abc import MutableMapping
from http.cookies import SimpleCookie
from typing import Any

from outbox.console.auth import ASGIApp, Receive, Scope, Send
from outbox.console.config import ConsoleConfig

__all__ = ["SESSION_COOKIE", "BrowserGuard", "allowed_hostnames"]

SESSION_COOKIE = "rocketbox_console_session"
_SESSION = re.compile(r"[0-9a-f]{64}")
_SECURITY_HEADERS = [
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", b"frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]
_WILDCARDS = frozenset({"0.0.0.0", "::", ""})


def allowed_hostnames(config: ConsoleConfig) -> frozenset[str]:
    """The host names (lower case, IPv6 without brackets) a ``Host`` header may carry."""
    names = {"localhost", config.host.lower().strip("[]"),
             *(h.lower().strip("[]") for h in config.allowed_hosts)}
    return frozenset(names - _WILDCARDS)


def _hostname(host_header: str) -> str:
    """``example.com:8080`` -> ``example.com``; ``[::1]:80`` -> ``::1``."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    if host.count(":") > 1:  # a bare IPv6 literal
        return host
    return host.rsplit(":", 1)[0] if ":" in host else host


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class BrowserGuard:
    """ASGI middleware applying the rules of the module docstring."""

    def __init__(self, app: ASGIApp, config: ConsoleConfig) -> None:
        self.app = app
        self.allowed = allowed_hostnames(config)
        self.any_address = config.host.strip("[]") in _WILDCARDS

    def host_allowed(self, host_header: str) -> bool:
        name = _hostname(host_header)
        return name in self.allowed or (self.any_address and _is_address(name))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v.decode("latin-1") for k, v in scope.get("headers") or ()}
        host = headers.get(b"host", "")
        if not self.host_allowed(host):
            await _refuse(send, 421, f"421: Host {host!r} is not one this console answers to; "
                                     "start it with --allowed-host NAME to serve that name\n")
            return
        if scope.get("method") == "POST":
            origin = headers.get(b"origin")
            bearer = headers.get(b"authorization", "").lower().startswith("bearer ")
            if origin is None and not bearer:
                await _refuse(send, 403, "403: a POST must carry an Origin header (browsers "
                                         "send it); scripts use Authorization: Bearer TOKEN\n")
                return
            if origin is not None and origin.lower() not in (f"http://{host.lower()}",
                                                             f"https://{host.lower()}"):
                await _refuse(send, 403, f"403: Origin {origin!r} is not this console "
                                         f"(http://{host})\n")
                return
        session = SimpleCookie(headers.get(b"cookie", "")).get(SESSION_COOKIE)
        value = session.value if session is not None else ""
        fresh = not _SESSION.fullmatch(value)
        if fresh:
            value = secrets.token_hex(32)
        scope.setdefault("state", {})["console_session"] = value

        async def send_with_headers(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                extra = list(_SECURITY_HEADERS)
                if fresh:
                    extra.append((b"set-cookie", f"{SESSION_COOKIE}={value}; Path=/; HttpOnly; "
                                                 "SameSite=Strict".encode()))
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


async def _refuse(send: Send, status: int, text: str) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), *_SECURITY_HEADERS]})
    await send({"type": "http.response.body", "body": text.encode()})
