"""The decorator benchmark's FastAPI app: the Flask routes' twins, async, on psycopg async.

``bench/decorator.py --frameworks fastapi`` serves it with uvicorn (its own
event loop, in a thread of the bench process) next to the Flask app, in
front of the same PostgreSQL, and drives it with the same client. The four
routes do what the Flask ones do, through an ``AsyncSession`` on
``postgresql+psycopg_async`` (the driver on which the ``body=`` row rides on
the ``COMMIT``, as it does for Flask): ``bare``, ``row`` (the outbox row by
hand, its own statement), ``ride`` (the row by hand in the ``COMMIT``'s
query, the decorator's floor) and ``decorated``
(``@rocketbox.transactional_message``). uvicorn keeps connections alive
(for 600 s here: the client holds one per route across the batches of the
other routes), where werkzeug closes each one.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from datetime import UTC, datetime
from typing import Any

from _decorator_app import ROW_SQL, ride_statement, row_params

# at module level, not in make_app: FastAPI resolves the views' (string) annotations in
# this module's globals
from fastapi import Depends, FastAPI, Request
from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncSession

from integrations.fastapi import Rocketbox

__all__ = ["serve_fastapi"]


def make_app(url: str, orders: Any) -> Any:
    rocketbox = Rocketbox(url.replace("+psycopg:", "+psycopg_async:"), celery_broker="",
                          broker="127.0.0.1:1", engine_options={"pool_size": 12})
    app = FastAPI(lifespan=rocketbox.lifespan)
    sessions = rocketbox.sessions

    async def write_order(request: Request, session: AsyncSession) -> dict[str, Any]:
        data = await request.json()
        ref = uuid.uuid4().hex
        order_id = (await session.execute(insert(orders).values(
            ref=ref, item=str(data["item"]), qty=int(data["qty"]),
            created_at=datetime.now(UTC)).returning(orders.c.id))).scalar_one()
        return {"id": order_id, "ref": ref}

    @app.post("/bare", status_code=201)
    async def bare(request: Request) -> dict[str, Any]:
        async with sessions() as session:
            answer = await write_order(request, session)
            await session.commit()
        return answer

    @app.post("/row", status_code=201)
    async def row(request: Request) -> dict[str, Any]:
        async with sessions() as session:
            answer = await write_order(request, session)
            await (await session.connection()).exec_driver_sql(ROW_SQL, row_params(answer))
            await session.commit()
        return answer

    @app.post("/ride", status_code=201)
    async def ride(request: Request) -> dict[str, Any]:
        async with sessions() as session:
            answer = await write_order(request, session)
            conn = await session.connection()
            raw = (await conn.get_raw_connection()).driver_connection
            assert raw is not None
            await raw.execute(ride_statement(answer), prepare=False)
            await session.commit()  # psycopg finds the server idle: nothing more is sent
        return answer

    @app.post("/decorated", status_code=201)
    @rocketbox.transactional_message(topic="Orders", tag="OrderCreated", body=lambda rv: rv,
                                     keys=lambda rv: rv["ref"])
    async def decorated(request: Request,
                        session: AsyncSession = Depends(rocketbox.session),  # noqa: B008
                        ) -> dict[str, Any]:
        return await write_order(request, session)

    return app


def serve_fastapi(url: str, orders: Any) -> tuple[int, Any]:
    """Serve the app with uvicorn in a thread; returns its port and a stop function."""
    import uvicorn

    from tests.support.servers import free_port

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(make_app(url, orders),
                                           host="127.0.0.1", port=port, log_level="warning",
                                           access_log=False, loop="asyncio",
                                           timeout_keep_alive=600))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), name="uvicorn",
                              daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        threading.Event().wait(0.05)

    def stop() -> None:
        server.should_exit = True
        thread.join(10)

    return port, stop
