"""The web-framework integrations' errors: a branch of the outbox's tree.

Django, Flask and FastAPI raise the outbox's own errors
(:class:`~outbox.errors.ConfigurationError` for a setting,
:class:`~outbox.errors.NoTransactionError` for a publish outside the view's
transaction) and add these, grouped by what the caller does next. Classes
defined outside this module name their module in brackets::

    OutboxError                     (outbox.errors)
    │
    │  fix the configuration
    ├── ConfigurationError          (outbox.errors)
    │   └── _SettingsError          [flask._cli] a broker setting a ``flask rocketbox``
    │                               command cannot work with (also a click.ClickException,
    │                               so click prints it and exits 2)
    │
    │  a bug in the caller
    ├── AlreadyInitialisedError     the Flask extension's ``init_app`` ran twice on one
    │                               app: ``app`` (also a RuntimeError)
    │
    │  retry later (``retriable``)
    └── HalfFirstError              ``half_first`` mode could not send the half before the
                                    commit; the work was rolled back: ``tx_id``
"""

from __future__ import annotations

from outbox.errors import OutboxError

__all__ = ["AlreadyInitialisedError", "HalfFirstError"]


class AlreadyInitialisedError(OutboxError, RuntimeError):
    """``Rocketbox.init_app`` was called a second time for the same app ``app`` (its name).

    Also a :class:`RuntimeError`, which is what it raised before.
    """

    def __init__(self, *, app: str) -> None:
        super().__init__(f"rocketbox is already initialised on this app ({app}); "
                         "call init_app once per app")
        self.app = app


class HalfFirstError(OutboxError):
    """``half_first`` mode could not send a half before the commit: the work is rolled back.

    ``tx_id`` names the refused message when the broker refused one of them.
    """

    retriable = True

    def __init__(self, message: str, *, tx_id: str = "") -> None:
        super().__init__(message)
        self.tx_id = tx_id
