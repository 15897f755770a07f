"""Check-back: ask a producer what became of a transaction, and act on its answer.

The broker's check service (running in a worker thread) calls
``channel.send_check(request)`` on a producer's connection; the connection
hands the request to the event loop, which runs :func:`ask_producer`:

1. send ``CHECK_TRANSACTION_STATE`` on that connection, with a server-side
   request id, and wait for the producer's ``CheckTransactionResponse``;
2. for ``COMMIT`` or ``ROLLBACK``, call ``broker.end_transaction(...,
   from_check=True)`` in a worker thread (it writes to the store);
   ``UNKNOWN`` is a valid answer that changes nothing: the half is checked
   again on a later round.

Failures (no answer in time, connection gone, error response, a refused
resolution) are logged and dropped: the check service simply checks again.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from broker_lite.core.model import EndRequest
from broker_lite.errors import BrokerError, ResponseCode
from broker_lite.protocol import BodyError, RequestCode, decode
from broker_lite.protocol import messages as m
from broker_lite.serving.context import ServerContext

__all__ = ["CheckTarget", "ask_producer"]

log = logging.getLogger("broker_lite.server")


class CheckTarget(Protocol):
    """The producer connection a check goes to."""

    remote_address: str

    async def request(self, code: RequestCode, body: Any,
                      timeout: float) -> tuple[int, bytes]: ...


async def ask_producer(ctx: ServerContext, target: CheckTarget,
                       request: m.CheckTransactionRequest) -> None:
    """Run one check-back to its end; never raises (except cancellation)."""
    tx = request.transaction_id
    try:
        code, body = await target.request(RequestCode.CHECK_TRANSACTION_STATE, request,
                                          ctx.config.check_reply_timeout)
    except TimeoutError:
        log.warning("check-back of transaction %r: %s did not answer within %gs", tx,
                    target.remote_address, ctx.config.check_reply_timeout)
        return
    except ConnectionError:
        log.info("check-back of transaction %r: %s disconnected", tx, target.remote_address)
        return
    if code != ResponseCode.SUCCESS:
        log.warning("check-back of transaction %r: %s answered error %s: %s", tx,
                    target.remote_address, _code_name(code), _error_message(body))
        return
    try:
        answer = decode(body, m.CheckTransactionResponse)
    except BodyError as exc:
        log.warning("check-back of transaction %r: %s sent a malformed answer: %s", tx,
                    target.remote_address, exc)
        return
    if answer.state == m.TxState.UNKNOWN:
        log.debug("check-back of transaction %r: still unknown", tx)
        return
    end = EndRequest(
        producer_group=request.producer_group, transaction_id=tx, state=answer.state,
        commit_log_offset=request.commit_log_offset, queue_offset=request.queue_offset,
        msg_id=request.msg_id, from_check=True)
    try:
        ended = await asyncio.to_thread(ctx.broker.end_transaction, end)
    except BrokerError as exc:
        log.warning("check-back of transaction %r: resolution %s refused: %s", tx,
                    _state_name(answer.state), exc)
        return
    log.info("check-back of transaction %r resolved it: %s%s", tx, ended.response.outcome,
             " (already)" if ended.response.already else "")


def _code_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return str(code)


def _state_name(state: int) -> str:
    try:
        return m.TxState(state).name
    except ValueError:
        return str(state)


def _error_message(body: bytes) -> str:
    try:
        return decode(body, m.ErrorBody).message
    except BodyError:
        return "<no error body>"
