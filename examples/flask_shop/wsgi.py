"""``flask --app examples.flask_shop.wsgi run`` (and ``... rocketbox relay|checker|status``)."""

from __future__ import annotations

from examples.flask_shop.settings import shop_config
from examples.flask_shop.shop import create_app

app = create_app(shop_config())
