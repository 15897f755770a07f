"""``apache.rocketmq.v2.MessagingService`` on ``grpc.aio``, over one :class:`GrpcDoor`.

Each method identifies the caller (:meth:`GrpcDoor.caller`: client id,
signature, account), runs the matching function of
:mod:`~broker_lite.grpc_door.route`, :mod:`~broker_lite.grpc_door.send`,
:mod:`~broker_lite.grpc_door.receive` or :mod:`~broker_lite.grpc_door.telemetry`,
and answers every failure inside the response, with its ``Status`` code
(:mod:`~broker_lite.grpc_door.status`): the gRPC status stays OK, as with
RocketMQ's proxy, so the official client raises its own exception for the
code. An unexpected exception is logged and answered INTERNAL_SERVER_ERROR;
it never ends the server or another client's call. A request that is not
valid protobuf is refused by grpc itself (gRPC status UNKNOWN, "Error parsing
message") before any of this runs.

The generated stubs of the official ``rocketmq-python-client`` package
(``rocketmq.grpc_protocol``) provide the messages and the method table; this
class is plugged in with their ``add_MessagingServiceServicer_to_server``.

Not served, answered UNSUPPORTED: PullMessage, UpdateOffset, GetOffset,
QueryOffset (the v5 pull consumer, which the Python client does not have),
RecallMessage (the core cannot cancel a scheduled message) and
SyncLiteSubscription (lite topics).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

from broker_lite.grpc_door import receive, route, send, telemetry
from broker_lite.grpc_door.auth import Caller
from broker_lite.grpc_door.door import GrpcDoor
from broker_lite.grpc_door.status import Code, status, status_for

__all__ = ["MessagingService", "add_to_server"]

_Handler = Callable[[GrpcDoor, Caller, Any], Any]
_AsyncHandler = Callable[[GrpcDoor, Caller, Any], Awaitable[Any]]


def _unsupported(what: str) -> Any:
    return status(Code.UNSUPPORTED, f"{what} is not supported by broker_lite")


class MessagingService:
    """The servicer: one coroutine per RPC of ``MessagingService``."""

    def __init__(self, door: GrpcDoor) -> None:
        self._door = door

    async def _sync(self, what: str, request: Any, context: Any, handler: _Handler,
                    response: Callable[..., Any]) -> Any:
        try:
            return handler(self._door, self._door.caller(context), request)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return response(status=status_for(exc, what=what))

    async def _async(self, what: str, request: Any, context: Any, handler: _AsyncHandler,
                     response: Callable[..., Any]) -> Any:
        try:
            return await handler(self._door, self._door.caller(context), request)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return response(status=status_for(exc, what=what))

    # -- routes and clients ---------------------------------------------------------------

    async def QueryRoute(self, request: Any, context: Any) -> Any:
        return await self._sync("QueryRoute", request, context, route.query_route,
                                spb.QueryRouteResponse)

    async def QueryAssignment(self, request: Any, context: Any) -> Any:
        return await self._sync("QueryAssignment", request, context, route.query_assignment,
                                spb.QueryAssignmentResponse)

    async def Heartbeat(self, request: Any, context: Any) -> Any:
        return await self._sync("Heartbeat", request, context, telemetry.heartbeat,
                                spb.HeartbeatResponse)

    async def NotifyClientTermination(self, request: Any, context: Any) -> Any:
        return await self._sync("NotifyClientTermination", request, context,
                                telemetry.notify_client_termination,
                                spb.NotifyClientTerminationResponse)

    async def Telemetry(self, request_iterator: Any,
                        context: Any) -> AsyncIterator[Any]:
        async for command in telemetry.telemetry(self._door, request_iterator, context):
            yield command

    # -- producing ------------------------------------------------------------------------

    async def SendMessage(self, request: Any, context: Any) -> Any:
        return await self._async("SendMessage", request, context, send.send_message,
                                 spb.SendMessageResponse)

    async def EndTransaction(self, request: Any, context: Any) -> Any:
        return await self._async("EndTransaction", request, context, send.end_transaction,
                                 spb.EndTransactionResponse)

    async def RecallMessage(self, request: Any, context: Any) -> Any:
        return spb.RecallMessageResponse(status=_unsupported("recalling a delayed message"))

    # -- consuming ------------------------------------------------------------------------

    async def ReceiveMessage(self, request: Any,
                             context: Any) -> AsyncIterator[Any]:
        try:
            caller = self._door.caller(context)
        except Exception as exc:
            yield spb.ReceiveMessageResponse(status=status_for(exc, what="ReceiveMessage"))
            return
        async for response in receive.receive_message(self._door, caller, request, context):
            yield response

    async def AckMessage(self, request: Any, context: Any) -> Any:
        return await self._sync("AckMessage", request, context, receive.ack_message,
                                spb.AckMessageResponse)

    async def ChangeInvisibleDuration(self, request: Any, context: Any) -> Any:
        return await self._sync("ChangeInvisibleDuration", request, context,
                                receive.change_invisible_duration,
                                spb.ChangeInvisibleDurationResponse)

    async def ForwardMessageToDeadLetterQueue(self, request: Any,
                                              context: Any) -> Any:
        return await self._async("ForwardMessageToDeadLetterQueue", request, context,
                                 receive.forward_to_dlq,
                                 spb.ForwardMessageToDeadLetterQueueResponse)

    # -- not served -----------------------------------------------------------------------

    async def PullMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        yield spb.PullMessageResponse(status=_unsupported("PullMessage (the v5 pull consumer)"))

    async def UpdateOffset(self, request: Any, context: Any) -> Any:
        return spb.UpdateOffsetResponse(status=_unsupported("UpdateOffset"))

    async def GetOffset(self, request: Any, context: Any) -> Any:
        return spb.GetOffsetResponse(status=_unsupported("GetOffset"))

    async def QueryOffset(self, request: Any, context: Any) -> Any:
        return spb.QueryOffsetResponse(status=_unsupported("QueryOffset"))

    async def SyncLiteSubscription(self, request: Any, context: Any) -> Any:
        return spb.SyncLiteSubscriptionResponse(status=_unsupported("lite topics"))


def add_to_server(server: Any, door: GrpcDoor) -> MessagingService:
    """Serve ``MessagingService`` on a ``grpc.aio`` server (before it starts)."""
    servicer = MessagingService(door)
    service_pb2_grpc.add_MessagingServiceServicer_to_server(servicer, server)
    return servicer
