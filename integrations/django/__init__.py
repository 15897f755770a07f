"""Django app for rocketbox (label ``rocketbox``).

Add ``"integrations.django"`` to ``INSTALLED_APPS``, configure
``settings.ROCKETBOX`` (a dict, see :mod:`integrations.django.conf`) and run
``manage.py migrate rocketbox``. Then::

    from integrations.django import publish, transactional_message

    @transactional_message(topic="Orders", tag="OrderCreated")
    def create_order(request):
        order = Order.objects.create(...)
        publish(None, {"id": order.id})
        return JsonResponse({"id": order.id}, status=201)

Management commands: ``rocketbox_relay``, ``rocketbox_checker``,
``rocketbox_status``. System checks: ``rocketbox.E001`` .. ``W001``. The
decorator semantics are the Flask integration's (docs/integrations.md).
"""

from __future__ import annotations

from typing import Any

__all__ = ["TransactionalMessageMixin", "apublish", "publish", "transactional_message"]


def __getattr__(name: str) -> Any:
    # Lazy: Django imports this package while loading apps, before settings are usable.
    if name in __all__:
        from integrations.django import decorators

        return getattr(decorators, name)
    raise AttributeError(name)
