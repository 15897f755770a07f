"""Flask integration: the :class:`Rocketbox` extension and ``@transactional_message``.

::

    app = Flask(__name__)
    app.config["ROCKETBOX_DATABASE"] = "sqlite:///shop.db"
    rocketbox = Rocketbox(app)

    @app.post("/orders")
    @transactional_message(topic="Orders", tag="OrderCreated")
    def create_order():
        rocketbox.session.execute(insert(orders).values(...))
        rocketbox.publish(None, {"order": 1})
        return {"ok": True}, 201

``flask rocketbox migrate|relay|checker|status`` run the outbox's parts with
the app's configuration. See docs/integrations.md.
"""

from __future__ import annotations

from integrations._unit import MessageSpec
from integrations.errors import AlreadyInitialisedError, HalfFirstError
from integrations.flask._decorator import transactional_message
from integrations.flask._extension import EXTENSION_KEY, FlaskState, Rocketbox, publish, state_for

__all__ = [
    "EXTENSION_KEY",
    "AlreadyInitialisedError",
    "FlaskState",
    "HalfFirstError",
    "MessageSpec",
    "Rocketbox",
    "publish",
    "state_for",
    "transactional_message",
]
