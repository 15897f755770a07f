"""broker_lite.core.acl: file loading, HELLO authentication, and permission checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from broker_lite.core.acl import BAD_CREDENTIALS, Acl, AclFileError, Perm, parse_perm
from broker_lite.errors import NoPermissionError, ResponseCode, UnauthorizedError
from broker_lite.protocol.signing import hello_signature_ok, sign_hello

NOW = 1_700_000_000_000

DOC: dict[str, Any] = {
    "accounts": [
        {"access_key": "app", "secret_key": "s3cret", "topic_perms":
            {"Orders": "PUB|SUB", "Audit": "SUB"}, "group_perms": {"inventory": "SUB",
                                                                   "banned": "DENY"},
         "default_topic_perm": "DENY", "default_group_perm": "SUB"},
        {"access_key": "reader", "secret_key": "r", "topic_perms": {"Orders": "SUB"}},
        {"access_key": "root", "secret_key": "toor", "admin": True,
         "default_topic_perm": "PUB|SUB"},
    ],
    "clock_skew_seconds": 60,
}


@pytest.fixture
def acl() -> Acl:
    return Acl.from_dict(DOC)


def _auth(acl: Acl, key: str = "app", secret: str = "s3cret", *, client: str = "c1",
          ts: int = NOW, nonce: str = "n1", now: int = NOW, signature: str | None = None) -> Any:
    sig = sign_hello(secret, client, ts, nonce) if signature is None else signature
    return acl.authenticate(key, ts, nonce, now, signed_by=lambda secret_key: hello_signature_ok(
        secret_key, client, ts, nonce, sig))


@pytest.mark.timeout(10)
def test_load_reads_the_documented_format(tmp_path: Path) -> None:
    path = tmp_path / "acl.json"
    path.write_text(json.dumps(DOC))
    acl = Acl.load(path)
    assert [a.access_key for a in acl.accounts] == ["app", "reader", "root"]
    assert acl.secret_for("app") == "s3cret" and acl.secret_for("nobody") is None
    assert acl.clock_skew_ms == 60_000
    app = acl.account("app")
    assert app is not None and app.allows("Topic", "Orders", "Pub")
    assert app.allows("Topic", "Orders", "Sub") and not app.allows("Topic", "Audit", "Pub")
    assert "s3cret" not in repr(app)


@pytest.mark.timeout(10)
@pytest.mark.parametrize(("doc", "named"), [
    ([], "top level"),
    ({"accounts": {}}, "'accounts' must be a list"),
    ({"accounts": [], "clock_skew": 3}, "unknown field(s) 'clock_skew'"),
    ({"accounts": [], "clock_skew_seconds": -1}, "clock_skew_seconds"),
    ({"accounts": [{"secret_key": "s"}]}, "accounts[0].access_key"),
    ({"accounts": [{"access_key": "a", "secret_key": ""}]}, "accounts[0].secret_key"),
    ({"accounts": [{"access_key": "a", "secret_key": "s", "admin": "yes"}]},
     "accounts[0].admin"),
    ({"accounts": [{"access_key": "a", "secret_key": "s", "topic_perms": {"T": "WRITE"}}]},
     "accounts[0].topic_perms['T']"),
    ({"accounts": [{"access_key": "a", "secret_key": "s", "group_perm": {}}]},
     "unknown field(s) 'group_perm'"),
    ({"accounts": [{"access_key": "a", "secret_key": "s"}, {"access_key": "a",
                                                             "secret_key": "t"}]},
     "listed twice"),
])
def test_malformed_documents_name_the_field(doc: Any, named: str) -> None:
    with pytest.raises(AclFileError) as info:
        Acl.from_dict(doc)
    assert named in str(info.value)


@pytest.mark.timeout(10)
def test_load_names_the_file_when_it_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    with pytest.raises(AclFileError, match=r"broken\.json is not valid JSON"):
        Acl.load(path)
    with pytest.raises(AclFileError, match="cannot read ACL file"):
        Acl.load(tmp_path / "missing.json")
    path.write_text(json.dumps({"accounts": [{"access_key": "a"}]}))
    with pytest.raises(AclFileError, match=r"broken\.json: accounts\[0\].secret_key"):
        Acl.load(path)


@pytest.mark.timeout(10)
def test_parse_perm() -> None:
    assert parse_perm("PUB|SUB") == parse_perm("sub | pub") == Perm.PUB | Perm.SUB
    assert parse_perm("DENY") == Perm.DENY
    assert (Perm.PUB | Perm.SUB).label == "PUB|SUB" and Perm.DENY.label == "DENY"


@pytest.mark.timeout(10)
def test_signature_is_hex_hmac_sha256_of_the_three_fields() -> None:
    import hashlib
    import hmac

    expected = hmac.new(b"k", b"cid\n123\nnon", hashlib.sha256).hexdigest()
    assert sign_hello("k", "cid", 123, "non") == expected


@pytest.mark.timeout(10)
def test_right_signature_authenticates(acl: Acl) -> None:
    assert _auth(acl).access_key == "app"


@pytest.mark.timeout(10)
@pytest.mark.parametrize(("kwargs", "reason"), [
    ({"key": ""}, "no access_key"),
    ({"key": "ghost"}, BAD_CREDENTIALS),
    ({"secret": "wrong"}, BAD_CREDENTIALS),
    ({"signature": "00" * 32}, BAD_CREDENTIALS),
    ({"signature": "not hex at all"}, BAD_CREDENTIALS),
    ({"nonce": ""}, "no nonce"),
    ({"ts": NOW - 61_000}, "away from the broker's clock"),
    ({"ts": NOW + 61_000}, "away from the broker's clock"),
])
def test_bad_credentials_are_unauthorized(acl: Acl, kwargs: dict[str, Any], reason: str) -> None:
    with pytest.raises(UnauthorizedError) as info:
        _auth(acl, **kwargs)
    assert reason in str(info.value)
    assert info.value.code == ResponseCode.UNAUTHORIZED


@pytest.mark.timeout(10)
def test_a_nonce_is_accepted_once_while_its_timestamp_is_valid(acl: Acl) -> None:
    _auth(acl, nonce="once")
    with pytest.raises(UnauthorizedError, match="already used"):
        _auth(acl, nonce="once", now=NOW + 1000)
    _auth(acl, "reader", "r", nonce="once")  # nonces are per access key
    # Once the timestamp is past the skew window the nonce is forgotten: the
    # old HELLO fails the clock check instead, never the memory.
    with pytest.raises(UnauthorizedError, match="clock"):
        _auth(acl, nonce="once", now=NOW + 61_001)


@pytest.mark.timeout(10)
def test_topic_and_group_permissions(acl: Acl) -> None:
    app, reader = acl.account("app"), acl.account("reader")
    assert app is not None and reader is not None
    app.check_topic("Orders", "Pub")
    app.check_topic("Audit", "Sub")
    with pytest.raises(NoPermissionError, match="needs Pub on Topic:Audit"):
        app.check_topic("Audit", "Pub")
    with pytest.raises(NoPermissionError, match="Topic:Other"):
        app.check_topic("Other", "Sub")
    app.check_group("inventory")
    app.check_group("anything")  # default_group_perm SUB, written in the file
    with pytest.raises(NoPermissionError, match="Group:banned"):
        app.check_group("banned")
    with pytest.raises(NoPermissionError, match="Group:inventory"):
        reader.check_group("inventory")  # the older format's default is now DENY
    # retry and dead-letter topics are their group's: read with Sub on it, never sent to
    app.check_topic("%RETRY%inventory", "Sub")
    with pytest.raises(NoPermissionError, match="Group:banned"):
        app.check_topic("%DLQ%banned", "Sub")
    with pytest.raises(NoPermissionError, match="sends a message back"):
        app.check_topic("%RETRY%inventory", "Pub")
    # producer groups (older format): an account that may publish may act for one, but
    # check-backs and ends need Pub on the half's topic too
    app.check_producer("pg")
    assert app.may_produce("pg", "Orders") and not app.may_produce("pg", "Audit")
    with pytest.raises(NoPermissionError, match="producer group 'pg'"):
        reader.check_producer("pg")


@pytest.mark.timeout(10)
def test_only_admins_pass_admin_checks(acl: Acl) -> None:
    root, app = acl.account("root"), acl.account("app")
    assert root is not None and app is not None
    root.check_admin("creating topic 'T'")
    with pytest.raises(NoPermissionError, match="needs an admin account"):
        app.check_admin("creating topic 'T'")
