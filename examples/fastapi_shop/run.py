"""Run the shop's parts: ``python -m examples.fastapi_shop.run COMMAND``.

``migrate``    create the shop's and the inventory's tables (outbox ones by Alembic)
``web``        serve the shop (uvicorn) and print ``shop ready http://HOST:PORT``
``relay``      the Celery relay worker with its sweeper
``checker``    the check-back responder; prints ``checker ready``
``inventory``  the inventory consumer (``examples/flask_shop/inventory.py``); prints
               ``inventory ready``
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence

from examples.fastapi_shop.settings import inventory_db, shop_settings
from examples.flask_shop import inventory
from examples.flask_shop.commands import check_start, run_part, serve_checker, shop_parser
from outbox import migrate

PROG = "python -m examples.fastapi_shop.run"


def _migrate() -> int:
    from examples.fastapi_shop.shop import Base, rocketbox

    engine = rocketbox.base_outbox.engine
    Base.metadata.create_all(engine)
    migrate.upgrade(engine)
    engine.dispose()
    inventory.migrate(inventory_db())
    print("migrated", flush=True)
    return 0


def _web(host: str, port: int) -> int:
    import uvicorn

    from examples.fastapi_shop.shop import app, rocketbox

    if code := check_start(PROG, "web", rocketbox.base_outbox, broker=False):
        return code
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))

    async def serve() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started:
            if task.done():
                await task  # it failed to start: raise why
                return
            await asyncio.sleep(0.05)
        bound = server.servers[0].sockets[0].getsockname()[1]
        print(f"shop ready http://{host}:{bound}", flush=True)
        await task

    asyncio.run(serve())  # uvicorn stops on SIGTERM and SIGINT
    return 0


def _relay() -> int:
    from examples.fastapi_shop.shop import rocketbox
    from outbox.celery import run_worker

    if code := check_start(PROG, "relay", rocketbox.base_outbox):
        return code
    broker = rocketbox.celery_broker
    assert broker is not None
    return run_worker(rocketbox.base_outbox, celery_broker=broker, celery_backend=None,
                      concurrency=2, sweeper=True, loglevel="INFO", checker=False,
                      settings=shop_settings()["celery_settings"])


def _checker() -> int:
    from examples.fastapi_shop.shop import rocketbox

    if code := check_start(PROG, "checker", rocketbox.base_outbox):
        return code
    return serve_checker(rocketbox.base_outbox)


def _inventory() -> int:
    return inventory.serve(inventory_db(), shop_settings()["broker"])


def main(argv: Sequence[str] | None = None) -> int:
    parser, _ = shop_parser(PROG)
    return run_part(PROG, parser.parse_args(argv), {
        "migrate": lambda _: _migrate(), "web": lambda args: _web(args.host, args.port),
        "relay": lambda _: _relay(), "checker": lambda _: _checker(),
        "inventory": lambda _: _inventory()})


if __name__ == "__main__":
    sys.exit(main())
