"""A client library's internals a target writes through, checked once at start.

The NATS and RabbitMQ targets write whole batches through a few private
attributes of their client (nats-py 2's, aiormq 7's), pinned by their
extras. :func:`require_internals` fails fast, naming the package and the
range to install, when the client installed is another one: every row would
fail otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

from outbox.errors import ConfigurationError

__all__ = ["require_internals"]


def require_internals(obj: object, kind: type, names: Sequence[str], *, target: str,
                      package: str, version: str, writes: str, extra: str,
                      pin: str) -> None:
    """Raise :class:`ConfigurationError` (``setting=package``) unless ``obj`` is a
    ``kind`` with every attribute in ``names``."""
    missing = [name for name in names if not hasattr(obj, name)]
    if not isinstance(obj, kind) or missing:
        raise ConfigurationError(
            f"{target} target: {package} {version} is not the one the target writes "
            f"{writes} through ({type(obj).__name__} lacks "
            f"{', '.join(missing) or f'the {package} {kind.__name__} type'}); install the "
            f"extra's range: pip install 'rocketbox[{extra}]' ({pin})", setting=package)
