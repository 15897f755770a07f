"""rocketbox's optional extras: what each one installs, and the one line a missing one gives.

A plain ``pip install rocketbox`` serves the web app, the Celery relay to
broker_lite and the broker's native door (docs/design.md, "Install"). The rest
comes with an extra; the code that needs one imports it where it is used, and,
when it is missing, fails with :func:`needs_extra`'s line, naming the extra:

    the RocketMQ target needs the 'rocketmq' extra: pip install 'rocketbox[rocketmq]'

:data:`EXTRA_MODULES` maps each extra to the top-level modules it brings, so a
:class:`ModuleNotFoundError` can be told apart from a bug (:func:`extra_for`).
This module imports nothing beyond the standard library.
"""

from __future__ import annotations

import importlib.util

__all__ = ["EXTRA_MODULES", "extra_for", "missing_extra", "needs_extra"]

#: extra -> the top-level modules it installs (what ``find_spec`` looks for)
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "rocketmq": ("grpc", "google.protobuf", "rocketmq"),
    "nats": ("nats",),
    "rabbitmq": ("aio_pika", "aiormq", "pamqp"),
    "compression": ("lz4", "zstandard"),
    "console": ("starlette", "jinja2", "multipart", "uvicorn"),
    "spark": ("pyspark", "py4j", "pyarrow"),
    "otel": ("opentelemetry",),
    "django": ("django",),
    "flask": ("flask", "flask_sqlalchemy"),
    "fastapi": ("fastapi", "uvicorn"),
}


def needs_extra(what: str, extra: str) -> str:
    """The one line: ``<what> needs the '<extra>' extra: pip install 'rocketbox[<extra>]'``."""
    return f"{what} needs the '{extra}' extra: pip install 'rocketbox[{extra}]'"


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package is missing
        return False


def missing_extra(extra: str) -> bool:
    """Whether a module ``extra`` installs cannot be found (nothing is imported)."""
    return not all(_installed(module) for module in EXTRA_MODULES[extra])


def extra_for(exc: ModuleNotFoundError) -> str | None:
    """The extra that installs the module ``exc`` could not find, or ``None`` (a bug)."""
    name = exc.name or ""
    for extra, modules in EXTRA_MODULES.items():
        if any(name == module or name.startswith(module + ".") or module.startswith(name + ".")
               for module in modules):
            return extra
    return None
