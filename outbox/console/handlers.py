"""What every page handler of the console shares: the :class:`Console` state, templates,
input parsing and the confirm-then-run flow of write actions.

Write actions go through :func:`confirm_or_run`: the first POST shows what
will happen and asks to confirm; the confirming POST (with the CSRF token)
does it and logs one line naming who did it. The pages
(:mod:`outbox.console.pages_outbox`, :mod:`outbox.console.pages_broker`)
import this module; :mod:`outbox.console.app` imports them and builds the
app, so no module imports back up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode

from sqlalchemy import Engine
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from broker_lite.client import Admin
from outbox.console.auth import csrf_token, csrf_valid, who
from outbox.console.broker_link import BrokerLink
from outbox.console.config import ConsoleConfig
from outbox.console.sampler import Sampler
from outbox.status import format_age

__all__ = ["Console", "confirm_or_run", "console_of", "parse_input", "render", "templates"]

log = logging.getLogger("rocketbox.console")
actions_log = logging.getLogger("rocketbox.console.actions")
_T = TypeVar("_T")

templates = Jinja2Templates(directory=str(Path(__file__).with_name("templates")))


def _when(value: datetime | int | None) -> str:
    if value is None or value == 0:
        return "-"
    if isinstance(value, int):
        value = datetime.fromtimestamp(value / 1000, UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _bytes(value: int | None) -> str:
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{value} B"


#: RocketMQ's topic permission bits (``PermName``)
_PERMS = ((8, "priority"), (4, "read"), (2, "write"), (1, "inherit"))


def _perm(value: int | None) -> str:
    """``6`` -> ``read, write`` (RocketMQ's ``PermName.perm2String`` spelled out)."""
    if value is None:
        return "-"
    names = [name for bit, name in _PERMS if value & bit]
    return ", ".join(names) if names else "none (deny)"


templates.env.filters.update(age=format_age, when=_when, size=_bytes, perm=_perm)


@dataclass
class Console:
    """What the handlers share (``request.app.state.console``)."""

    config: ConsoleConfig
    engine: Engine | None
    link: BrokerLink
    sampler: Sampler
    #: (name, engine) of the other databases whose inbox rows the trace reads (--inbox-db)
    inbox_engines: list[tuple[str, Engine]] = field(default_factory=list)

    def admin(self) -> Admin:
        """The broker's admin client; BrokerUnreachableError (an outage page) if unreachable."""
        return self.link.admin()


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def parse_input(name: str, text: str, cast: Callable[[str], _T], what: str) -> _T:
    """``cast(text)`` for the form or query field ``name``; else ``ValueError`` naming it."""
    try:
        return cast(text)
    except ValueError:
        raise ValueError(f"{name} must be {what}, got {text!r}") from None


def _session(request: Request) -> str:
    return str(request.scope.get("state", {}).get("console_session") or "")


def render(request: Request, name: str, status_code: int = 200, **context: Any) -> Response:
    console = console_of(request)
    context.update(request=request, csrf=csrf_token(_session(request)),
                   has_db=console.engine is not None,
                   flash=request.query_params.get("done"),
                   problem=request.query_params.get("problem"))
    return templates.TemplateResponse(request, name, context, status_code=status_code)


async def confirm_or_run(request: Request, *, what: str, run: Callable[[FormData], str],
                         back: str) -> Response:
    """Ask to confirm ``what``; on the confirming POST call ``run(form)`` and go ``back``.

    ``run`` returns the outcome shown on the page it goes back to; it may raise
    ``ValueError`` or a broker error, shown the same way.
    """
    form = await request.form()
    if form.get("confirm") != "yes":
        fields = [(k, v) for k, v in form.multi_items() if k not in ("csrf", "confirm")]
        return render(request, "confirm.html", what=what, action=str(request.url.path),
                      fields=fields, back=back)
    if not csrf_valid(str(form.get("csrf") or ""), _session(request)):
        return Response("403: the form's CSRF token is missing or stale; reload the page",
                        status_code=403, media_type="text/plain")
    actor = who(request.scope)
    try:
        outcome = await _in_thread(run, form)
    except Exception as exc:
        actions_log.warning("%s failed by %s: %s", what, actor, exc,
                            extra={"console_user": actor, "action": what})
        return _back(back, problem=f"{what} failed: {exc}")
    actions_log.warning("%s by %s: %s", what, actor, outcome,
                        extra={"console_user": actor, "action": what})
    return _back(back, done=f"{what}: {outcome}")


async def _in_thread(fn: Callable[[FormData], str], form: FormData) -> str:
    return await run_in_threadpool(fn, form)


def _back(url: str, **query: str) -> RedirectResponse:
    joiner = "&" if "?" in url else "?"
    return RedirectResponse(f"{url}{joiner}{urlencode(query)}", status_code=303)

