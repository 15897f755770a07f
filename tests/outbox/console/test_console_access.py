"""Who may use the console: loopback by default; elsewhere only with credentials.

A real broker_lite and the console on a real socket; requests over HTTP.
"""

from __future__ import annotations

import base64
import http.cookiejar
import logging
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from outbox.cli import main
from outbox.console import ConsoleConfig, ConsoleConfigError, ConsoleThread
from tests.support import BrokerLiteServer, start_broker_lite, wait_until

pytestmark = pytest.mark.timeout(60)


def _get(url: str, headers: dict[str, str] | None = None,
         data: dict[str, str] | None = None, *,
         jar: http.cookiejar.CookieJar | None = None) -> tuple[int, str]:
    """GET (POST with ``data``: with the console's own Origin, as a browser sends it);
    ``jar`` keeps the session cookie between calls, as a browser does."""
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    headers = dict(headers or {})
    if body is not None:
        parts = urllib.parse.urlsplit(url)
        headers.setdefault("Origin", f"{parts.scheme}://{parts.netloc}")
    request = urllib.request.Request(url, data=body, headers=headers)
    handlers: list[urllib.request.BaseHandler] = [_NoRedirect()]
    if jar is not None:
        handlers.append(urllib.request.HTTPCookieProcessor(jar))
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def _basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def test_binding_off_loopback_without_credentials_is_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConsoleConfigError, match="not loopback"):
        ConsoleConfig(broker="127.0.0.1:1", host="0.0.0.0")
    with pytest.raises(ConsoleConfigError, match="go together"):
        ConsoleConfig(broker="127.0.0.1:1", host="0.0.0.0", access_key="ak")
    assert main(["console", "--broker", "127.0.0.1:1", "--host", "0.0.0.0", "--port", "0"]) == 2
    assert "needs credentials" in capsys.readouterr().err


@pytest.fixture
def guarded(broker_lite_server: BrokerLiteServer) -> Iterator[ConsoleThread]:
    console = ConsoleThread(ConsoleConfig(
        broker=broker_lite_server.native, host="0.0.0.0", port=0, token="s3cret",
        access_key="ops", secret_key="ops-secret", sample_seconds=60)).start()
    try:
        yield console
    finally:
        console.stop()


def test_off_loopback_a_request_without_credentials_gets_401(
        guarded: ConsoleThread, caplog: pytest.LogCaptureFixture) -> None:
    url = f"http://127.0.0.1:{guarded.port}"
    for path in ("/", "/topics", "/api/series", "/static/htmx.min.js"):
        status, _ = _get(url + path)
        assert status == 401, path
    assert _get(url + "/", _basic("alice", "wrong"))[0] == 401
    assert _get(url + "/", {"Authorization": "Bearer nope"})[0] == 401
    assert _get(url + "/", _basic("alice", "s3cret"))[0] == 200
    assert _get(url + "/", _basic("ops", "ops-secret"))[0] == 200
    assert _get(url + "/topics", {"Authorization": "Bearer s3cret"})[0] == 200

    # a write: the first POST only asks; without the page's CSRF token nothing happens
    caplog.set_level(logging.INFO, logger="rocketbox.console.actions")
    alice = _basic("alice", "s3cret")
    jar = http.cookiejar.CookieJar()
    status, page = _get(url + "/topics/create", alice, {"topic": "Audited", "queues": "2"},
                        jar=jar)
    assert status == 200 and "You are about to" in page
    status, _ = _get(url + "/topics/create", alice,
                     {"topic": "Audited", "queues": "2", "confirm": "yes", "csrf": "forged"},
                     jar=jar)
    assert status == 403
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert csrf is not None
    status, _ = _get(url + "/topics/create", alice, {"topic": "Audited", "queues": "2",
                                                     "confirm": "yes", "csrf": csrf[1]}, jar=jar)
    assert status == 303
    _, topics = _get(url + "/topics", alice)
    assert "Audited" in topics
    logged = [r.getMessage() for r in caplog.records if r.name == "rocketbox.console.actions"]
    assert logged == ["create topic 'Audited' by alice@127.0.0.1: Audited has 2 queue(s)"]


def test_broker_lite_serve_console_port_serves_the_broker_pages(tmp_path: Path) -> None:
    with start_broker_lite(tmp_path / "broker", ("--console-port", "0")) as broker:
        def console_url() -> str | None:
            found = re.search(r"console listening on (http://\S+)", broker.stderr_text())
            return found[1] if found else None

        wait_until(console_url, timeout=30, message=broker.stderr_text)
        url = console_url()
        assert url is not None
        status, topics = _get(url + "/topics")
        assert status == 200 and "RMQ_SYS_TRANS_HALF_TOPIC" in topics
        status, rows = _get(url + "/rows")
        assert status == 200 and "no database" in rows
    refused = subprocess.run(
        [sys.executable, "-m", "broker_lite", "serve", "--data-dir", str(tmp_path / "b2"),
         "--port", "0", "--console-port", "0", "--console-host", "0.0.0.0"],
        capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert refused.returncode == 2
    assert "needs credentials" in refused.stderr
