"""Run the shop's parts: ``python -m examples.flask_shop.run COMMAND``.

``migrate``    create the shop's and the inventory's tables (outbox ones by Alembic)
``web``        serve the shop (werkzeug, threaded) and print ``shop ready http://HOST:PORT``
``relay``      the Celery relay worker with its sweeper (``flask rocketbox relay`` does the same)
``checker``    the check-back responder
``inventory``  the inventory consumer; prints ``inventory ready``

``relay --demo-crash-dir D`` is the demo's hook: a relay pass that sent the
half of an order whose ref starts with ``crash-`` kills its own process
(SIGKILL) before ending it, once per order (a marker file in ``D``), so the
broker's check-back has to resolve it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from werkzeug.serving import make_server

from examples.flask_shop import inventory
from examples.flask_shop.commands import check_start, run_part, serve_checker, shop_parser
from examples.flask_shop.settings import inventory_db, inventory_keys, shop_config
from examples.flask_shop.shop import create_app, db
from integrations.flask import state_for
from outbox import Outbox, migrate
from outbox.targets import EndOutcome, HalfOutcome, OutgoingMessage, Publisher, TxEnd
from outbox.targets.choose import publisher_for


class CrashBetweenHalfAndEnd:
    """The demo's hook around the relay's publisher (see the module doc)."""

    def __init__(self, inner: Publisher, markers: Path) -> None:
        self.inner = inner
        self.markers = markers

    def send_halves(self, messages: Sequence[OutgoingMessage]) -> list[HalfOutcome]:
        result = self.inner.send_halves(messages)
        doomed = [m.tx_id for m in messages if any(k.startswith("crash-") for k in m.keys)
                  and not (self.markers / m.tx_id).exists()]
        if doomed:
            for tx_id in doomed:
                (self.markers / tx_id).touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    def end_transactions(self, ends: Sequence[TxEnd]) -> list[EndOutcome]:
        return self.inner.end_transactions(ends)

    def close(self) -> None:
        self.inner.close()


def _migrate() -> int:
    app = create_app(shop_config())
    with app.app_context():
        db.create_all()
        migrate.upgrade(db.engine)
    inventory.migrate(inventory_db())
    print("migrated", flush=True)
    return 0


PROG = "python -m examples.flask_shop.run"


def _web(host: str, port: int) -> int:
    app = create_app(shop_config())
    if code := check_start(PROG, "web", state_for(app).base_outbox, broker=False):
        return code
    server = make_server(host, port, app, threaded=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    print(f"shop ready http://{host}:{server.server_port}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    server.shutdown()
    return 0


def _relay(crash_dir: str | None) -> int:
    from outbox.celery import run_worker

    app = create_app(shop_config())
    state = state_for(app)
    factory = None
    if crash_dir:
        markers = Path(crash_dir)
        markers.mkdir(parents=True, exist_ok=True)

        def factory(outbox: Outbox) -> Publisher:
            return CrashBetweenHalfAndEnd(publisher_for(outbox), markers)  # either target

    if code := check_start(PROG, "relay", state.base_outbox):
        return code
    broker = state.celery_broker
    assert broker is not None
    return run_worker(state.base_outbox, celery_broker=broker,
                      celery_backend=app.config["ROCKETBOX_CELERY_BACKEND"], concurrency=2,
                      sweeper=True, loglevel="INFO", checker=False,
                      settings=app.config["ROCKETBOX_CELERY_SETTINGS"],
                      publisher_factory=factory)


def _checker() -> int:
    outbox = state_for(create_app(shop_config())).base_outbox
    if code := check_start(PROG, "checker", outbox):
        return code
    return serve_checker(outbox)


def _inventory(access_key: str | None, secret_key: str | None) -> int:
    return inventory.serve(inventory_db(), shop_config()["ROCKETBOX_BROKER"],
                           access_key=access_key, secret_key=secret_key)


def main(argv: Sequence[str] | None = None) -> int:
    parser, commands = shop_parser(PROG)
    commands["relay"].add_argument("--demo-crash-dir")
    consumer = commands["inventory"]
    access_key, secret_key = inventory_keys()
    consumer.add_argument("--access-key", default=access_key, metavar="KEY",
                          help="broker ACL account of the consumer (env "
                               "SHOP_INVENTORY_ACCESS_KEY, else SHOP_ACCESS_KEY; default: none)")
    consumer.add_argument("--secret-key", default=secret_key, metavar="SECRET",
                          help="its secret (env SHOP_INVENTORY_SECRET_KEY, else "
                               "SHOP_SECRET_KEY; keep it off the command line)")
    return run_part(PROG, parser.parse_args(argv), {
        "migrate": lambda _: _migrate(), "web": lambda args: _web(args.host, args.port),
        "relay": lambda args: _relay(args.demo_crash_dir), "checker": lambda _: _checker(),
        "inventory": lambda args: _inventory(args.access_key, args.secret_key)})


if __name__ == "__main__":
    sys.exit(main())
