"""``broker-lite serve``: run a broker with its native and gRPC doors (docs/design.md §5).

Once both doors listen it prints exactly one line on stdout::

    broker_lite ready native=HOST:PORT grpc=HOST:PORT

with the ports actually bound (``--port 0`` picks a free one; ``grpc=off`` on an
install without the ``rocketmq`` extra, where only the native door runs). Everything else
goes to stderr as log lines. SIGTERM or SIGINT shuts it down cleanly (exit 0).
Exit 2 means the command line, the ACL file or the bind policy was refused;
exit 1 means the broker could not start (port taken, unreadable data dir).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker_lite.cli import serve_console
from broker_lite.cli.arg_types import positive_float
from broker_lite.core import Broker, BrokerConfig
from broker_lite.core.acl import Acl, AclFileError
from broker_lite.core.log_safe import escape_handlers
from broker_lite.errors import BrokerError, ConfigurationError
from broker_lite.extras import missing_extra, needs_extra
from broker_lite.grpc_door.config import GrpcDoorConfig
from broker_lite.protocol import DEFAULT_MAX_FRAME_SIZE
from broker_lite.runtime import BindRefused, check_bind_policy, serve
from broker_lite.serving import ServerConfig
from broker_lite.storage import StoreConfig
from broker_lite.storage.store import read_layout

__all__ = ["build_configs", "build_grpc_config", "parse_size", "register", "run"]

log = logging.getLogger("broker_lite.server")

_DEFAULT_SEGMENT = 64 << 20
_DEFAULT_MESSAGE = 4 << 20
_UNITS = {"": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}

DESCRIPTION = """\
Run a broker_lite broker on --data-dir. It serves two doors over one store:

  native  broker_lite's pipelined binary protocol (the framework's own client),
          on --port;
  gRPC    the Apache RocketMQ 5 MessagingService (apache.rocketmq.v2), so the
          official RocketMQ 5 clients work unchanged, on --grpc-port (plaintext
          HTTP/2; docs/grpc.md says what is served). It needs the rocketmq
          extra (pip install 'rocketbox[rocketmq]'); without it, grpc=off.

Once both listen, one line goes to stdout:
  broker_lite ready native=HOST:PORT grpc=HOST:PORT
with the ports actually bound. Logs go to stderr. SIGTERM or SIGINT stops
accepting, closes connections, saves offsets and state, and exits 0.

Without --acl the broker is open to anyone who can reach it, so it refuses a
non-loopback --host unless --insecure is given. Sizes accept K, M, G suffixes
(powers of 1024), e.g. 64M."""


def parse_size(text: str) -> int:
    """``"4096"``, ``"64M"``, ``"8MiB"`` -> bytes (powers of 1024)."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 4096, 64K, 64M, 1G)")
    return int(match.group(1)) * _UNITS[unit]


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0-65535; 0 picks a free one)")
    return int(text)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "serve", help="run the broker (native protocol and gRPC doors)",
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = p.add_argument_group("where")
    where.add_argument("--data-dir", required=True, type=Path, metavar="DIR",
                       help="directory of the commit log, queues, offsets and state; created "
                            "if missing, recovered if the last run crashed")
    where.add_argument("--host", default="127.0.0.1",
                       help="address both doors listen on (default: 127.0.0.1); a non-loopback "
                            "address needs --acl or --insecure")
    where.add_argument("--port", type=_port, default=10911,
                       help="native protocol port (default: 10911; 0 picks a free port)")
    where.add_argument("--grpc-port", type=_port, default=None,
                       help="port of the RocketMQ 5 gRPC door (default: a free port; no "
                            "door without the 'rocketmq' extra); official clients connect "
                            "to HOST:PORT without TLS")
    where.add_argument("--broker-name", default="broker-lite", metavar="NAME",
                       help="the name announced to clients in HELLO (default: broker-lite)")

    store = p.add_argument_group("storage")
    store.add_argument("--flush", choices=("async", "sync"), default="async",
                       help="async (default): acknowledge once written to the page cache, "
                            "fsync every 0.5 s; sync: acknowledge sends, transaction ends and "
                            "send-backs only after fsync (group commit: one fsync serves all "
                            "concurrent writers)")
    store.add_argument("--segment-size", type=parse_size, default=None, metavar="BYTES",
                       help="bytes per commit-log segment (default: what the data dir was "
                            "created with, else 64M); fixed once the data dir exists")
    store.add_argument("--max-message-size", type=parse_size, default=_DEFAULT_MESSAGE,
                       metavar="BYTES", help="largest message body accepted (default: 4M)")

    tx = p.add_argument_group("transactions")
    tx.add_argument("--tx-timeout", type=float, default=6.0, metavar="S",
                    help="a half message is checked back with its producer once it is older "
                         "than this, in broker store time (default: 6, RocketMQ's)")
    tx.add_argument("--tx-check-interval", type=positive_float, default=30.0, metavar="S",
                    help="how often the check service scans unresolved halves (default: 30)")
    tx.add_argument("--tx-check-max", type=int, default=15, metavar="N",
                    help="check-backs before an unresolved half is discarded to "
                         "TRANS_CHECK_MAX_TIME_TOPIC (default: 15)")
    tx.add_argument("--reject-transactions", action="store_true",
                    help="refuse half messages with NO_PERMISSION (RocketMQ's "
                         "rejectTransactionMessage)")

    topics = p.add_argument_group("topics and consumers")
    topics.add_argument("--auto-create-topics", dest="auto_create_topics",
                        action="store_true", default=False,
                        help="a send to an unknown topic creates it, as in a demo or a test "
                             "(default: off: such a send fails with TOPIC_NOT_EXIST, so a typo "
                             "in a topic name is an error, not a new topic; create topics "
                             "with `broker-lite topic create`)")
    topics.add_argument("--no-auto-create-topics", dest="auto_create_topics",
                        action="store_false", help="the default: unknown topics are refused")
    topics.add_argument("--default-queues", type=int, default=4, metavar="N",
                        help="queues of an auto-created topic (default: 4)")
    topics.add_argument("--client-expiry", type=positive_float, default=120.0, metavar="S",
                        help="drop a client (and its check-back channel) after this long "
                             "without a heartbeat (default: 120)")
    topics.add_argument("--grpc-max-delivery-attempts", type=int, default=17, metavar="N",
                        help="deliveries of a message to a gRPC (RocketMQ 5) consumer before it "
                             "goes to %%DLQ%%group (default: 17, i.e. 16 retries)")
    proxy = p.add_argument_group(
        "RocketMQ 5 proxy semantics (gRPC door; docs/grpc-proxy-semantics.md)")
    proxy.add_argument("--grpc-proxy-semantics", action="store_true",
                       help="make the gRPC door as strict as Apache RocketMQ 5's proxy, so "
                            "code tested here fails where it would fail on a RocketMQ "
                            "cluster: a half's transaction data is kept in this process only, "
                            "for --grpc-transaction-data-expire, and used up by the first "
                            "EndTransaction (a retried end, a late end or an end after a "
                            "restart fails: INTERNAL_SERVER_ERROR 'cannot found transaction "
                            "data'); EndTransaction is answered OK on hand-off, before the "
                            "broker applies it; every half sent is stored (none "
                            "de-duplicated) and logged as one 'half stored {JSON}' line on "
                            "broker_lite.grpc.halves; transactional batches are refused; a "
                            "message must match its topic's message.type (broker-lite topic "
                            "create -a +message.type=TRANSACTION); check-backs reach only "
                            "producers that announced the topic, timed by --tx-timeout, "
                            "--tx-check-interval and --tx-check-max. Default: off")
    proxy.add_argument("--grpc-transaction-data-expire", type=positive_float, default=30.0,
                       metavar="S",
                       help="with --grpc-proxy-semantics: how long a half (or a check-back) "
                            "may be ended after it was stored (or sent), as the proxy's "
                            "transactionDataExpireMillis (default: 30)")
    proxy.add_argument("--grpc-transaction-data-max", type=int, default=15, metavar="N",
                       help="with --grpc-proxy-semantics: transaction data kept per "
                            "topic@transactionId, the oldest dropped first, as the proxy's "
                            "transactionDataMaxNum (default: 15)")
    proxy.add_argument("--tx-op-batch-interval", type=float, default=0.0, metavar="S",
                       help="with --grpc-proxy-semantics: write the op record that closes a "
                            "half S seconds after its end, as RocketMQ's broker batches them "
                            "(transactionOpBatchInterval, 3 s there): until then the half can "
                            "still be checked back, the check renews it, and the op record "
                            "closes only the copy the end named, so a COMMIT answered for the "
                            "renewed copy writes the message a second time, as on RocketMQ. "
                            "Default: 0 (the op record is written with the end)")
    topics.add_argument("--delay-time-scale", type=positive_float, default=1.0, metavar="F",
                        help="multiply every delay level and retry back-off by F; for tests "
                             "(0.01 turns 1 s into 10 ms). Default: 1")

    net = p.add_argument_group("security and limits")
    net.add_argument("--acl", type=Path, default=None, metavar="FILE",
                     help="JSON ACL file (format: see broker_lite.core.acl): clients must sign "
                          "their HELLO, and each request is checked against the account's "
                          "topic and group permissions")
    net.add_argument("--grpc-clock-skew", type=positive_float, default=None, metavar="S",
                     help="with --acl: how far a gRPC request's x-mq-date-time may be from the "
                          "broker's clock (default: the ACL file's clock_skew_seconds, 300)")
    net.add_argument("--insecure", action="store_true",
                     help="allow a non-loopback --host without --acl (anyone who can reach the "
                          "port can send, consume and end transactions)")
    net.add_argument("--max-frame-size", type=parse_size, default=DEFAULT_MAX_FRAME_SIZE,
                     metavar="BYTES",
                     help="largest native frame accepted or sent, header included "
                          "(default: 8M); a bigger frame is answered FRAME_TOO_LARGE and its "
                          "connection closed")
    serve_console.add_arguments(p)
    p.add_argument("--log-level", default="info",
                   choices=("debug", "info", "warning", "error"),
                   help="log verbosity on stderr (default: info)")
    p.set_defaults(handler=run)


def build_grpc_config(args: argparse.Namespace) -> GrpcDoorConfig:
    """The gRPC door's config from parsed flags; ``ValueError`` if refused."""
    return GrpcDoorConfig(clock_skew_seconds=args.grpc_clock_skew,
                          max_delivery_attempts=args.grpc_max_delivery_attempts,
                          proxy_semantics=args.grpc_proxy_semantics,
                          transaction_data_expire_seconds=args.grpc_transaction_data_expire,
                          transaction_data_max_num=args.grpc_transaction_data_max)


def build_configs(args: argparse.Namespace) -> tuple[BrokerConfig, ServerConfig]:
    """The core's and the server's configs from parsed flags; ``ValueError`` if refused."""
    data_dir: Path = args.data_dir
    if args.tx_op_batch_interval and not args.grpc_proxy_semantics:
        raise ValueError("--tx-op-batch-interval needs --grpc-proxy-semantics (only RocketMQ's "
                         "proxy answers an end before its op record is written)")
    segment_size = args.segment_size
    if segment_size is None:
        layout = read_layout(data_dir) if data_dir.is_dir() else None
        segment_size = (layout or {}).get("segment_size", _DEFAULT_SEGMENT)
    store = StoreConfig(data_dir=data_dir, segment_size=segment_size, flush=args.flush,
                        max_message_size=args.max_message_size)
    broker = BrokerConfig(
        store=store, broker_name=args.broker_name, auto_create_topics=args.auto_create_topics,
        default_queues=args.default_queues, reject_transactions=args.reject_transactions,
        tx_timeout=args.tx_timeout, tx_check_interval=args.tx_check_interval,
        tx_check_max=args.tx_check_max, tx_op_batch_interval=args.tx_op_batch_interval,
        delay_time_scale=args.delay_time_scale,
        client_expiry=args.client_expiry)
    server = ServerConfig(host=args.host, port=args.port, grpc_port=_grpc_port(args.grpc_port),
                          max_frame_size=args.max_frame_size, insecure=args.insecure)
    if server.max_frame_size < store.max_message_size + 64 * 1024:
        log.warning("--max-frame-size %d leaves little room over --max-message-size %d: the "
                    "largest messages cannot be sent or pulled", server.max_frame_size,
                    store.max_message_size)
    return broker, server


def _grpc_port(asked: int | None) -> int | None:
    """The gRPC door's port: ``None`` (no door) on an install without the ``rocketmq`` extra.

    Asked for a port without the extra, the one line says which extra to install.
    """
    if not missing_extra("rocketmq"):
        return 0 if asked is None else asked
    if asked is not None:
        raise ConfigurationError(needs_extra("--grpc-port: the gRPC door", "rocketmq"),
                                 setting="--grpc-port")
    log.warning("no gRPC door: %s (the native door serves)",
                needs_extra("the gRPC door", "rocketmq"))
    return None


def _fail(message: str, code: int) -> int:
    print(f"broker-lite serve: {message}", file=sys.stderr)
    return code


#: allocations between young-generation collections in the broker process (Python's: 700)
_GC_YOUNG = 10_000


def run(args: argparse.Namespace, *, open_broker: Callable[[BrokerConfig], Broker] = Broker
        ) -> int:
    """``broker-lite serve``; ``open_broker`` opens the core (a test's fault hook passes its
    own, e.g. tests/support/double_commit_broker.py)."""
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    escape_handlers()  # a client's "\n" in an id never forges a log line
    try:
        acl = Acl.load(args.acl) if args.acl is not None else None
        check_bind_policy(args.host, acl=acl, insecure=args.insecure)
        broker_config, server_config = build_configs(args)
        grpc_config = build_grpc_config(args)
        command = serve_console.console_command(args)
    except (AclFileError, BindRefused) as exc:
        return _fail(str(exc), 2)
    except (ValueError, BrokerError) as exc:
        return _fail(f"invalid configuration: {exc}", 2)

    def ready(line: str) -> None:
        # What exists now (modules, the recovered store's maps) lives as long as the
        # process: take it out of the collector's view, so that full collections walk
        # only what came since. They had paused the event loop for 60-70 ms
        # (bench/relay.py, the latency at a steady load).
        gc.collect()
        gc.freeze()
        # A young-generation collection every 10,000 allocations, not 700: a batch of 64
        # transactions makes some 1,500 tracked objects (records, results, half entries),
        # and at Python's default the collector cost 4-8 us a transaction (40,000
        # transactions on a broker holding 40,000-170,000 halves, gc.callbacks timing);
        # at 10,000 it is 0.4-0.7 us. Cycles are still collected.
        gc.set_threshold(_GC_YOUNG, *gc.get_threshold()[1:])
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        if console is not None:
            console.start(line.split("native=", 1)[1].split()[0])

    console = serve_console.ConsoleProcess(command) if command is not None else None
    try:
        asyncio.run(serve(broker_config, server_config, acl=acl, ready=ready,
                          grpc_config=grpc_config, open_broker=open_broker))
    except OSError as exc:
        return _fail(f"cannot start: {exc}", 1)
    except BrokerError as exc:
        return _fail(f"cannot start: {exc}", 1)
    finally:
        if console is not None:
            console.stop()
    return 0
