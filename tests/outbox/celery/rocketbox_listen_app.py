"""The Celery app of the wake-up tests: ``celery -A rocketbox_listen_app worker``.

:mod:`rocketbox_celery_app`'s outbox, settings and publisher (the same
environment variables), with ``CelerySettings.listen`` on: the worker runs
the wake-up listener (outbox/celery/listen.py) next to its tasks.
"""

from __future__ import annotations

import dataclasses

from outbox.celery import make_celery
from tests.outbox.celery.rocketbox_celery_app import _publisher, env, outbox, settings

app = make_celery(outbox, broker_url=env["RB_TEST_CELERY_BROKER"],
                  settings=dataclasses.replace(settings, listen=True),
                  publisher_factory=_publisher)
