"""An HTTP client that behaves like one browser session: cookies kept, redirects not followed.

:class:`WebSession` sends what a browser would (a ``Host`` from the URL, an
``Origin`` on POST), and lets an attack change any of it: another ``Host``, no
``Origin`` or a foreign one, another session's CSRF token.
"""

from __future__ import annotations

import base64
import http.cookiejar
import re
import urllib.error
import urllib.parse
import urllib.request
from email.message import Message

__all__ = ["NO_ORIGIN", "WebSession", "basic_auth", "csrf_of"]

#: ``origin=NO_ORIGIN``: send the POST without an ``Origin`` header
NO_ORIGIN = ""


def basic_auth(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def csrf_of(page: str) -> str:
    """The CSRF token of the first write form on ``page``."""
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found is not None, page[:2000]
    return found[1]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


class WebSession:
    """One browser's worth of cookies against ``base`` (``http://HOST:PORT``)."""

    def __init__(self, base: str, headers: dict[str, str] | None = None) -> None:
        self.base = base
        self.headers = dict(headers or {})
        self.jar = http.cookiejar.CookieJar()
        self._opener = urllib.request.build_opener(
            _NoRedirect(), urllib.request.HTTPCookieProcessor(self.jar))

    def request(self, path: str, data: dict[str, str] | list[tuple[str, str]] | None = None, *,
                headers: dict[str, str] | None = None,
                origin: str | None = None) -> tuple[int, str, dict[str, str]]:
        """GET (POST with ``data``): status, body, headers (names in lower case). A POST
        carries the console's own ``Origin`` unless ``origin`` says otherwise
        (:data:`NO_ORIGIN`: none)."""
        body = urllib.parse.urlencode(data).encode() if data is not None else None
        sent = {**self.headers, **(headers or {})}
        if body is not None:
            own = origin if origin is not None else self.base
            if own:
                sent["Origin"] = own
        request = urllib.request.Request(self.base + path, data=body, headers=sent)
        try:
            with self._opener.open(request, timeout=30) as response:
                return response.status, response.read().decode(), _lower(response.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(), _lower(exc.headers)


def _lower(headers: Message) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}
