"""``rocketbox demo --acl``: the broker's accounts, one per part, and a part's signed env."""

from __future__ import annotations

import uuid
from typing import Any

__all__ = ["demo_acl", "keys_of", "signed_as"]


def demo_acl() -> dict[str, Any]:
    """``--acl``: one account per part, each with only what it needs (docs/acl.md)."""

    def allow(resource: str, *actions: str) -> dict[str, Any]:
        return {"resource": resource, "actions": list(actions)}

    def account(name: str, *policies: dict[str, Any], admin: bool = False) -> dict[str, Any]:
        return {"access_key": name, "secret_key": f"{name}-{uuid.uuid4().hex}",
                "admin": admin, "policies": list(policies)}

    # the relay sends halves (producer group "shop") and ends them, connected as group
    # "shop-relay" so that check-backs go to the checker, which answers them (Pub on the
    # producer group and on the halves' topic, Orders); the inventory consumes Orders
    # (to a RocketMQ proxy the start-up probe asks the route of "rocketbox-probe": Get)
    probe = allow("Topic:rocketbox-probe", "Get")
    return {"version": 2, "accounts": [
        account("admin", admin=True),
        account("relay", allow("Topic:Orders", "Pub"), allow("Group:shop", "Pub"),
                allow("Group:shop-relay", "Pub"), probe),
        account("checker", allow("Topic:Orders", "Pub"), allow("Group:shop", "Pub"),
                allow("Group:shop-relay", "Pub"), probe),  # its start-up probe: shop-relay
        account("inventory", allow("Topic:Orders", "Sub"), allow("Group:inventory", "Sub"),
                probe),
    ]}


def keys_of(acl: dict[str, Any] | None, name: str) -> tuple[str, str] | None:
    if acl is None:
        return None
    found = next(a for a in acl["accounts"] if a["access_key"] == name)
    return found["access_key"], found["secret_key"]


def signed_as(env: dict[str, str], keys: tuple[str, str] | None, *,
        prefix: str = "SHOP_") -> dict[str, str]:
    """``env`` signed as an account (``SHOP_ACCESS_KEY``...), or as it is without an ACL."""
    if keys is None:
        return env
    return {**env, f"{prefix}ACCESS_KEY": keys[0], f"{prefix}SECRET_KEY": keys[1]}
