"""Framing (issue 27, item 7): a page on another local port cannot frame the console.

The attack of the issue, in a real Chromium: a page served from another port on
127.0.0.1 frames the console's parked rows, to make one click replay a row.
The browser refuses to show the frame (``X-Frame-Options: DENY`` and CSP
``frame-ancestors 'none'``), and the page's own script cannot read or click
anything in it. The owner, in the same browser, then replays the row from the
console's own page.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from outbox import Outbox, publish
from outbox.console import ConsoleConfig, ConsoleThread
from outbox.models import transaction_table as t
from tests.support import start_broker_lite, wait_until
from tests.support.browser import chromium
from tests.support.sqlite import sqlite_outbox_engine

pytestmark = pytest.mark.timeout(180)


class _AttackerPage(http.server.BaseHTTPRequestHandler):
    target = ""

    def do_GET(self) -> None:
        page = (f'<!doctype html><title>win a prize</title><h1>click the button</h1>'
                f'<iframe id="victim" src="{self.target}" width="1000" height="600"></iframe>')
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.end_headers()
        self.wfile.write(page.encode())

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def attacker_site() -> Iterator[tuple[str, type[_AttackerPage]]]:
    handler = type("Handler", (_AttackerPage,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", handler
    finally:
        server.shutdown()
        server.server_close()


def test_another_local_port_cannot_frame_the_console(
        tmp_path: Path, attacker_site: tuple[str, type[_AttackerPage]]) -> None:
    attacker_url, handler = attacker_site
    engine = sqlite_outbox_engine(tmp_path / "outbox.db")
    with start_broker_lite(tmp_path / "broker") as broker, chromium() as driver:
        outbox = Outbox(engine=engine, broker=broker.native)
        with engine.begin() as conn:
            parked = publish(conn, "Refunds", {"refund": 1}, outbox=outbox)
            conn.execute(update(t).where(t.c.tx_id == parked).values(parked=True, attempts=5))

        def is_parked() -> bool:
            with engine.connect() as conn:
                return bool(conn.execute(select(t.c.parked).where(t.c.tx_id == parked))
                            .scalar_one())

        console = ConsoleThread(ConsoleConfig(broker=broker.native, port=0, sample_seconds=60),
                                engine=engine).start()
        try:
            handler.target = f"{console.url}/rows?state=parked"
            driver.get(attacker_url)
            frame = driver.find_element("id", "victim")
            # the browser blocks the frame and logs why
            refused = wait_until(lambda: _refused(driver) or _framed_console(driver, frame),
                                 timeout=30, message="the frame neither loaded nor was refused")
            shown = _framed_console(driver, frame)
            assert shown is None, f"the console was framed: {shown[:300] if shown else ''}"
            assert refused is True
            assert is_parked()

            # the owner, on the console's own page, replays it
            driver.get(f"{console.url}/rows?state=parked")
            driver.find_element("css selector", f'input[value="{parked}"]').click()
            driver.find_element("id", "replay-button").click()
            wait_until(lambda: driver.find_elements("id", "confirm-button"), timeout=30)
            driver.find_element("id", "confirm-button").click()
            wait_until(lambda: not is_parked(), timeout=30,
                       message=lambda: driver.page_source[:2000])
        finally:
            console.stop()
            engine.dispose()


def _framed_console(driver: Any, frame: Any) -> str | None:
    """The framed page's source when it is the console's (WebDriver reads any frame, unlike
    the framing page's script), else ``None``."""
    driver.switch_to.frame(frame)
    try:
        source = str(driver.page_source)
    finally:
        driver.switch_to.default_content()
    return source if "replay-form" in source else None


def _refused(driver: Any) -> bool:
    """The browser logged that it refused to frame the console."""
    return any("frame" in e["message"].lower() and ("x-frame-options" in e["message"].lower()
                                                    or "frame-ancestors" in e["message"].lower())
               for e in driver.get_log("browser"))
