"""rocketbox for FastAPI: async views whose messages commit with their ``AsyncSession``.

See docs/async.md. ``Rocketbox`` holds the async engine and the outbox;
``rocketbox.session`` is the session dependency, ``rocketbox.transactional_message``
the decorator, and ``await publish(...)`` adds a message inside a decorated view.
"""

from __future__ import annotations

from integrations.fastapi._decorator import publish, transactional_message
from integrations.fastapi._extension import Rocketbox, sync_url

__all__ = ["Rocketbox", "publish", "sync_url", "transactional_message"]
