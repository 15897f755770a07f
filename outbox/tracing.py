"""OpenTelemetry, when it is installed: one trace from the request to the consumer.

rocketbox depends on ``opentelemetry-api`` only through the ``otel`` extra;
without it every function here does nothing (and costs next to nothing).
With it, and an SDK configured by the application:

* ``publish()`` stores the caller's trace context with the row, in its
  ``headers``, under the W3C names ``traceparent`` and ``tracestate``
  (:func:`with_trace_context`); headers that already carry a ``traceparent``
  are left as they are;
* a relay pass that claimed rows makes a span ``rocketbox.relay`` with the
  children ``rocketbox.relay claim``, ``... half`` and ``... end``: a trace
  of its own, since one pass relays rows of many requests, each span
  carrying a *link* to every row's context (:func:`relay_span`,
  :func:`record_relay_span`; a pass that claimed nothing records nothing);
* the row's headers become the message's properties (:mod:`outbox.relay`),
  so the broker keeps the ``traceparent`` with the message and every client,
  native or gRPC, sees it;
* the inbox consumer's span (``rocketbox.inbox process``) is a child of
  the message's context (:func:`consumer_span`): the consumer's work lands in
  the request's trace.

docs/tracing.md draws one such trace.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

__all__ = ["TRACEPARENT", "TRACESTATE", "consumer_span", "enabled", "exported",
           "record_relay_span", "relay_span", "with_trace_context"]

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"

_trace: Any
_propagator: Any
try:
    from opentelemetry import trace as _otel_trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the otel extra is not installed
    _trace = _propagator = None
else:
    _trace, _propagator = _otel_trace, TraceContextTextMapPropagator()

_TRACER = "rocketbox"


def enabled() -> bool:
    """Whether ``opentelemetry-api`` is importable."""
    return _propagator is not None


def with_trace_context(headers: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``headers`` (copied) plus the current span's ``traceparent``/``tracestate``.

    Nothing is added when no span is recording a valid context, or when
    ``headers`` already has a ``traceparent``.
    """
    out = dict(headers) if headers else None
    if _propagator is None or (out is not None and TRACEPARENT in out):
        return out
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    if TRACEPARENT not in carrier:
        return out
    out = out if out is not None else {}
    out[TRACEPARENT] = carrier[TRACEPARENT]
    if TRACESTATE in carrier:
        out[TRACESTATE] = carrier[TRACESTATE]
    return out


def _context_of(headers: Mapping[str, Any] | None) -> Any:
    """The span context stored in ``headers`` (a row's or a message's), or None."""
    if _propagator is None or not headers or TRACEPARENT not in headers:
        return None
    carrier = {name: str(headers[name]) for name in (TRACEPARENT, TRACESTATE)
               if name in headers}
    span = _trace.get_current_span(_propagator.extract(carrier))
    context = span.get_span_context()
    return context if context.is_valid else None


def _links(rows_headers: Iterable[Mapping[str, Any] | None]) -> list[Any]:
    seen: dict[tuple[int, int], Any] = {}
    for headers in rows_headers:
        context = _context_of(headers)
        if context is not None:
            seen.setdefault((context.trace_id, context.span_id), context)
    return [_trace.Link(context) for context in seen.values()]


@contextlib.contextmanager
def relay_span(name: str, rows_headers: Iterable[Mapping[str, Any] | None] = (), *,
               attributes: Mapping[str, Any] | None = None,
               start_time: int | None = None) -> Iterator[Any]:
    """The current span ``rocketbox.relay[ name]`` while inside, linked to the rows' contexts.

    ``start_time`` (ns since the epoch) backdates it. Yields the span
    (``None`` without OpenTelemetry).
    """
    if not exported():
        yield None
        return
    tracer = _trace.get_tracer(_TRACER)
    with tracer.start_as_current_span(_relay_name(name), kind=_trace.SpanKind.PRODUCER,
                                      links=_links(rows_headers), start_time=start_time,
                                      attributes=_attributes(attributes or {})) as span:
        yield span


def record_relay_span(name: str, rows_headers: Iterable[Mapping[str, Any] | None], *,
                      start_time: int, attributes: Mapping[str, Any] | None = None) -> None:
    """A finished relay span from ``start_time`` (ns since the epoch) to now.

    For work whose rows are known only when it is over (the claim): an empty
    claim, which an idle relay makes every pass, is never recorded.
    """
    if not exported():
        return
    span = _trace.get_tracer(_TRACER).start_span(
        _relay_name(name), kind=_trace.SpanKind.PRODUCER, links=_links(rows_headers),
        start_time=start_time, attributes=_attributes(attributes or {}))
    span.end()


def exported() -> bool:
    """Whether a tracer provider is installed: without one every relay span is a no-op,
    and reading the rows' contexts for its links costs ~25 us a row for nothing (the
    relay does not even list the rows' headers then)."""
    return _trace is not None and not isinstance(_trace.get_tracer_provider(),
                                                 _trace.ProxyTracerProvider)


def _relay_name(name: str) -> str:
    return f"rocketbox.relay {name}" if name else "rocketbox.relay"


@contextlib.contextmanager
def consumer_span(topic: str, group: str, properties: Mapping[str, str],
                  attributes: Mapping[str, Any] | None = None) -> Iterator[Any]:
    """The inbox's span for one delivery: a child of the message's trace context."""
    if _trace is None:
        yield None
        return
    parent = None
    if TRACEPARENT in properties:
        parent = _propagator.extract({name: properties[name] for name in
                                      (TRACEPARENT, TRACESTATE) if name in properties})
    tracer = _trace.get_tracer(_TRACER)
    with tracer.start_as_current_span(
            "rocketbox.inbox process", context=parent, kind=_trace.SpanKind.CONSUMER,
            attributes=_attributes({"messaging.destination.name": topic,
                                    "messaging.consumer.group.name": group,
                                    **(attributes or {})})) as span:
        yield span


def _attributes(values: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}
