"""The decorator on Flask-SQLAlchemy's ``db.session``: ORM rows and messages commit together."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from flask import Flask, request
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import Integer, String, select
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

import integrations.django
import integrations.flask
from integrations.flask import Rocketbox, publish, state_for, transactional_message
from outbox import migrate
from tests.integrations.integrations_support import (
    broker_records,
    commit_counts,
    http,
    relay_all,
    serve_wsgi,
)
from tests.support import BrokerLiteServer


class Base(DeclarativeBase):
    pass


def _app(tmp_path: Path, broker: str) -> tuple[Flask, SQLAlchemy, Any]:
    db = SQLAlchemy(model_class=Base)

    class Item(db.Model):  # type: ignore[name-defined,misc]
        __tablename__ = "item"
        id: Mapped[int] = mapped_column(Integer, primary_key=True)
        name: Mapped[str] = mapped_column(String(50))

    app = Flask(__name__)
    app.config.update(SQLALCHEMY_DATABASE_URI=f"sqlite:///{tmp_path / 'fsa.sqlite'}",
                      ROCKETBOX_BROKER=broker, ROCKETBOX_CELERY_BROKER="")
    db.init_app(app)
    Rocketbox(app)  # ROCKETBOX_DATABASE unset: the app's Flask-SQLAlchemy

    @app.before_request
    def touch_session() -> None:
        db.session.execute(select(1))  # the session's transaction is already open

    @app.post("/items")
    @transactional_message(topic="Items", tag="ItemAdded")
    def add_item() -> tuple[dict[str, Any], int]:
        payload = request.get_json()
        item = Item(name=payload["name"])
        db.session.add(item)
        db.session.flush()
        tx_id = publish(None, {"id": item.id, "name": item.name}, keys=str(item.id))
        if payload.get("explode"):
            raise RuntimeError("boom")
        return {"id": item.id, "tx_id": tx_id}, 201

    with app.app_context():
        db.create_all()
        migrate.upgrade(db.engine)
    return app, db, Item


@pytest.mark.timeout(60)
def test_flask_sqlalchemy_session_commits_and_rolls_back_with_the_messages(
        tmp_path: Path, broker: BrokerLiteServer) -> None:
    app, db, item = _app(tmp_path, broker.native)
    with serve_wsgi(app) as address:
        status, body = http(address, "POST", "/items", {"name": "kettle"})
        assert status == 201
        assert http(address, "POST", "/items", {"name": "bomb", "explode": True})[0] == 500
    with app.app_context():
        assert [i.name for i in db.session.execute(select(item)).scalars()] == ["kettle"]
    assert relay_all(state_for(app).outbox) == 1
    assert commit_counts(broker_records(broker.data_dir)) == {body["tx_id"]: 1}
    # the relay writes the app's file too: the extension switched it to WAL
    with contextlib.closing(sqlite3.connect(tmp_path / "fsa.sqlite")) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


@pytest.mark.timeout(10)
def test_public_names() -> None:
    assert sorted(integrations.flask.__all__) == sorted(
        ["EXTENSION_KEY", "AlreadyInitialisedError", "FlaskState", "HalfFirstError",
         "MessageSpec", "Rocketbox", "publish", "state_for", "transactional_message"])
    assert all(hasattr(integrations.flask, name) for name in integrations.flask.__all__)
    assert sorted(integrations.django.__all__) == [
        "TransactionalMessageMixin", "apublish", "publish", "transactional_message"]
