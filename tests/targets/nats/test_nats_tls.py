"""``tls://``: the relay reaches a nats-server that requires TLS, and trusts only what the
machine trusts (nats-py's default context: the system's CAs, or ``SSL_CERT_FILE``).

A throw-away CA signs the server's certificate for 127.0.0.1. With that CA
trusted (``SSL_CERT_FILE``), a row relayed to ``tls://127.0.0.1:PORT`` is in
the stream; with it not trusted, the relay's start-up probe fails with one
configuration error saying the certificate is not trusted.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from outbox import Outbox, Relay
from outbox.errors import ConfigurationError
from outbox.publish import publish
from outbox.targets.choose import publisher_for, support_for
from tests.support.nats_server import start_nats
from tests.support.sqlite import sqlite_outbox_engine
from tests.targets.nats.nats_support import create_stream, fast_relay, stored


def _certificates(where: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate, server key) for 127.0.0.1."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=where, check=True, capture_output=True,
                       timeout=60)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
            "ca.pem", "-days", "1", "-subj", "/CN=rocketbox test CA")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out",
            "server.csr", "-subj", "/CN=127.0.0.1")
    (where / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.pem", "-days", "1", "-extfile", "san.ext")
    return where / "ca.pem", where / "server.pem", where / "server.key"


@pytest.mark.timeout(120)
def test_tls_address_relays_to_a_tls_server_it_trusts_and_refuses_one_it_does_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca, cert, key = _certificates(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))  # the machine trusts our CA
    relay = fast_relay()
    with start_nats(extra=("--tls", "--tlscert", str(cert), "--tlskey", str(key))) as server:
        address = f"tls://127.0.0.1:{server.port}"
        engine = sqlite_outbox_engine(tmp_path / "outbox.sqlite")
        outbox = Outbox(engine=engine, broker=address, relay=relay)
        create_stream(address, "SECURE", ["Secure"], relay)
        with Session(engine) as session, session.begin():
            tx_id = publish(session, "Secure", {"secret": 1}, outbox=outbox)

        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # a CA that did not sign it
        with pytest.raises(ConfigurationError, match="TLS certificate is not trusted"):
            support_for(outbox).probe(outbox)

        monkeypatch.setenv("SSL_CERT_FILE", str(ca))
        assert support_for(outbox).probe(outbox) is None
        publisher = publisher_for(outbox)
        try:
            assert Relay(outbox, publisher).drain().relayed == 1
        finally:
            publisher.close()
        assert [m.tx_id for m in stored(address, "SECURE")] == [tx_id]
        engine.dispose()
