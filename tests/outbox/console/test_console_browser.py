"""The console in a real headless Chromium, against real servers and real traffic.

Every page is reached by links from ``/``, shows the stack's data, logs no
browser console error, and is saved as NAME.png (into docs/console/, the README's
pictures, when ROCKETBOX_UPDATE_SCREENSHOTS=1). The write actions are done by
clicking, confirmation included:
creating a topic and replaying the parked row relays it exactly once;
resending the dead letter gets it to ``shipping``; a tx_id looked up shows
its whole trace, check-back and inbox row included.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from tests.outbox.console.browser_support import chromium, console_errors, screenshot
from tests.outbox.console.console_stack import Stack
from tests.support import wait_until

pytestmark = pytest.mark.timeout(240)

PAGES = {  # nav link text -> (screenshot name, a text the page must show)
    "Overview": ("overview", "Outbox backlog"),
    "Outbox rows": ("rows", "Outbox rows"),
    "Topics": ("topics", "Orders"),
    "Consumer groups": ("groups", "billing"),
    "Message lookup": ("lookup", "tx_id, message id or key"),
    "Transactions": ("transactions", "Halves awaiting resolution"),
    "Dead letters": ("dlq", "shipping"),
    "Audit": ("audit", "Divergent transactions"),
}


@pytest.fixture(scope="module")
def browser(stack: Stack) -> Iterator[Any]:
    with chromium() as driver:
        yield driver


def _by(kind: str) -> Any:
    from selenium.webdriver.common.by import By

    return {"css": By.CSS_SELECTOR, "link": By.LINK_TEXT, "id": By.ID}[kind]


def _find(driver: Any, kind: str, what: str) -> Any:
    return driver.find_element(_by(kind), what)


def _text(driver: Any) -> str:
    return str(_find(driver, "css", "body").text)


def _open(driver: Any, url: str) -> None:
    driver.get(url)
    assert console_errors(driver) == []


def _card(driver: Any, card_id: str) -> str:
    """A card's text, read in one script call (htmx replaces the cards while we look)."""
    return str(driver.execute_script(
        "return document.getElementById(arguments[0]).innerText.trim()", card_id))


def _confirm(driver: Any) -> str:
    """Click the confirmation page's button; the flash line of the page it returns to."""
    wait_until(lambda: driver.find_elements(_by("id"), "confirm-what"), timeout=15,
               message="the confirmation page did not come")
    assert "You are about to" in _find(driver, "id", "confirm-what").text
    _find(driver, "id", "confirm-button").click()
    wait_until(lambda: driver.find_elements(_by("css"), ".flash"), timeout=15)
    return str(_find(driver, "css", ".flash").text)


def test_every_page_renders_real_data_without_console_errors(stack: Stack,
                                                             browser: Any) -> None:
    more = stack.publish_orders(20)  # traffic while the overview samples it
    wait_until(lambda: all(stack.row(tx)["relayed_at"] for tx in more), timeout=60)
    series = stack.console_series()
    wait_until(lambda: any(v for v in stack.console_series()["relayed_per_s"]), timeout=20,
               message=lambda: str(stack.console_series()))
    series = stack.console_series()
    assert any(v is not None and v > 0 for v in series["latency_p50"]), series
    assert any(v for v in series["messages_per_s"]), series
    _open(browser, stack.url("/"))
    wait_until(lambda: browser.find_elements(_by("css"), "#chart-throughput canvas"),
               timeout=20, message="the overview's charts were not drawn")
    parked = _card(browser, "card-parked")  # the cards are swapped in every sample period
    assert "Parked rows\n1" in parked, parked
    assert _card(browser, "card-halves").endswith("\n1")  # the orphan
    screenshot(browser, "overview")
    links = {a.text: a.get_attribute("href")
             for a in browser.find_elements(_by("css"), "nav a") if a.text in PAGES}
    assert set(links) == set(PAGES)
    for name, (shot, must_show) in PAGES.items():
        _open(browser, links[name])
        assert must_show in _text(browser), name
        screenshot(browser, shot)
        if name == "Outbox rows":
            rows = _text(browser)
            assert all(tx in rows for tx in stack.orders) and stack.parked in rows
        if name == "Consumer groups":
            groups = _text(browser)
            assert "shipping" in groups and "lag 0" in groups and "client(s)" in groups
        if name == "Dead letters":
            _find(browser, "link", "shipping").click()
            assert stack.fragile in _text(browser)
            assert console_errors(browser) == []
            screenshot(browser, "dlq_group")
        if name == "Transactions":
            pending, discarded = (_find(browser, "id", "pending-halves").text,
                                  _find(browser, "id", "discarded-halves").text)
            assert stack.orphan in pending and "orphans" in pending, pending
            assert stack.discarded in discarded and stack.orphan not in discarded
        if name == "Audit":
            _find(browser, "link", stack.parked)  # each divergent tx links to its trace
    _open(browser, stack.url("/rows?state=parked"))
    parked = _text(browser)
    assert stack.parked in parked and stack.orders[0] not in parked
    assert "does not exist" in parked, parked
    _open(browser, stack.url("/rows?error=does+not+exist&topic=Refunds"))  # by error, topic
    assert stack.parked in _text(browser)
    _open(browser, stack.url("/rows?older_than_minutes=60"))  # by age: nothing is that old
    assert "no rows match" in _text(browser)
    _open(browser, stack.url(f"/trace/{stack.orders[0]}?body=text"))  # the body as text
    assert _find(browser, "id", "trace-body").text == '{"order":0,"total":0}'
    browser.get(stack.url("/rows?state=bogus"))  # a 400 page: the browser logs its status
    assert "state must be one of" in _text(browser)
    assert all("400 (Bad Request)" in e for e in console_errors(browser))


def test_replaying_a_parked_row_from_the_page_relays_it_exactly_once(
        stack: Stack, browser: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="rocketbox.console.actions")
    _open(browser, stack.url("/topics"))
    _find(browser, "id", "new-topic").send_keys("Refunds")
    _find(browser, "id", "create-topic-button").click()
    screenshot(browser, "confirm")
    assert "create topic 'Refunds'" in _confirm(browser)
    assert "Refunds" in [t.topic for t in stack.admin.list_topics()]

    _open(browser, stack.url("/rows?state=parked"))
    _find(browser, "css", f"input[value='{stack.parked}']").click()
    _find(browser, "id", "replay-button").click()
    assert "1 replayed" in _confirm(browser)
    wait_until(lambda: stack.row(stack.parked)["relayed_at"] is not None, timeout=60,
               message=lambda: stack.relay_log.read_text(errors="replace")[-3000:])
    assert stack.commits_of(stack.parked, "Refunds") == 1
    row = stack.row(stack.parked)
    assert not row["parked"] and row["last_error"] is None
    actions = [r.getMessage() for r in caplog.records if r.name == "rocketbox.console.actions"]
    assert any("replay 1 parked row(s)" in a and "anonymous@127.0.0.1" in a for a in actions), \
        actions
    _open(browser, stack.url(f"/trace/{stack.parked}"))
    assert "relayed" in _text(browser)


def test_resending_a_dead_letter_from_the_page_reaches_its_group(stack: Stack,
                                                                 browser: Any) -> None:
    stack.accepted.add(stack.fragile)
    _open(browser, stack.url("/dlq/shipping"))
    before = len(stack.shipped)
    _find(browser, "css", "button.resend").click()
    assert f"resend dead letter {stack.fragile} to group shipping" in _confirm(browser)
    wait_until(lambda: (stack.fragile, 0, "ok") in stack.shipped[before:], timeout=30,
               message=lambda: f"shipping deliveries: {stack.shipped}")


def test_a_tx_id_lookup_shows_the_whole_trace(stack: Stack, browser: Any) -> None:
    _open(browser, stack.url("/lookup"))
    _find(browser, "id", "lookup-q").send_keys(stack.checked)
    _find(browser, "id", "lookup-button").click()
    wait_until(lambda: f"/trace/{stack.checked}" in browser.current_url, timeout=15)
    assert console_errors(browser) == []
    events = [row.text for row in browser.find_elements(_by("css"), "#trace-events tbody tr")]
    kinds = [_find_kind(e) for e in events]
    for wanted in ("row written", "half stored", "check-back sent", "resolved COMMIT",
                   "committed (visible)", "processed (inbox row)"):
        assert wanted in kinds, (wanted, events)
    assert any("resolved COMMIT" in e and "check-back" in e for e in events), events
    assert any("processed (inbox row)" in e and "billing" in e for e in events), events
    deliveries = _find(browser, "id", "trace-deliveries").text
    assert "billing" in deliveries and "yes" in deliveries
    assert '"order": "checked"' in _find(browser, "id", "trace-body").text
    screenshot(browser, "trace")

    _open(browser, stack.url("/lookup?q=order-1"))  # a message key: the broker's index
    assert stack.orders[1] in _text(browser)


def _find_kind(event_row: str) -> str:
    for kind in ("row written", "half stored", "check-back sent", "resolved COMMIT",
                 "committed (visible)", "processed (inbox row)", "relayed"):
        if kind in event_row:
            return kind
    return event_row


def test_resetting_an_offset_from_the_page(stack: Stack, browser: Any) -> None:
    def billing_q0() -> int:
        [offset] = [o.committed for o in stack.admin.consumer_groups().offsets
                    if (o.group, o.topic, o.queue_id) == ("billing", "Orders", 0)]
        return offset

    committed = billing_q0()
    _open(browser, stack.url("/groups"))
    form = _find(browser, "css", "#group-billing form")  # Orders queue 0 comes first
    field_ = form.find_element(_by("css"), "input[name='offset']")
    field_.clear()
    field_.send_keys(str(committed))  # to where it is: the live consumer is not disturbed
    form.find_element(_by("css"), "button").click()
    assert (f"reset the offset of billing on Orders queue 0 to {committed}: done"
            in _confirm(browser))
    assert billing_q0() == committed
