"""bench/relay.py's command line: the options a run takes, and the hidden ones its
child roles (the relay worker, the peer's relay, the producer) are started with."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import msgspec
from _relay_common import SIDES

__all__ = ["SAVED_SIDES", "parse_args"]

#: the side combinations a full run saves, and where
SAVED_SIDES = {frozenset({"ours", "peer"}): "relay", frozenset(SIDES): "relay",
               frozenset({"ours", "rocketmq"}): "relay-rocketmq",
               frozenset({"rocketmq"}): "relay-rocketmq-client"}


def parse_args(argv: Sequence[str] | None, doc: str | None) -> argparse.Namespace:
    """The driver's and its children's arguments (``doc``: bench/relay.py's docstring, whose
    first paragraph is the description)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0] if doc else None)
    parser.add_argument("--role", default="main", help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, default=20_000,
                        help="rows per throughput run (default 20000)")
    parser.add_argument("--repeat", type=int, default=5,
                        help="throughput repetitions per side (default 5)")
    parser.add_argument("--rate", type=float, default=500.0,
                        help="offered load of the latency runs, tx/s (default 500)")
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="length of a latency run (default 20)")
    parser.add_argument("--lat-repeat", type=int, default=5,
                        help="latency repetitions per side (default 5)")
    parser.add_argument("--floor-rate", type=float, default=50.0,
                        help="after each latency repetition, the same sides again at this "
                             "offered load, low enough that no row waits for another: "
                             "commit-to-visible with no queueing, each side's floor on this "
                             "machine (tx/s; default 50; 0 skips it)")
    parser.add_argument("--floor-seconds", type=float, default=10.0,
                        help="length of each --floor-rate run (default 10)")
    parser.add_argument("--peer-configs", default="1/10/1,8/100/50,16/200/50,32/400/100,64/800/200",
                        help="faststream-outbox settings to try, comma-separated "
                             "max_workers/fetch_batch_size/terminal_flush_batch_size; the "
                             "best on throughput is used")
    parser.add_argument("--tune-rows", type=int, default=10_000,
                        help="rows per peer tuning run (default 10000)")
    parser.add_argument("--concurrency", type=int, default=4,
                        help="our Celery worker's threads (default 4)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="our relay's batch_size (default: the target's own, else the "
                             "library's, 200; the ours side's: BrokerLiteTarget.relay_tuning, "
                             "the nats side's: NatsTarget.relay_tuning)")
    parser.add_argument("--drain-lanes", type=int, default=None,
                        help="our relay's drain_lanes: passes the sweep runs at once "
                             "(default: the target's own, else the library's, 3; the ours "
                             "side's: BrokerLiteTarget.relay_tuning)")
    parser.add_argument("--sweep", default="",
                        help="only throughput runs of one of our worker sides (the first of "
                             "--sides among ours, nats, rocketmq), one per comma-separated "
                             "LANES/BATCH setting (drain_lanes/batch_size) in each "
                             "repetition, in rotating order; prints medians")
    parser.add_argument("--nats-sweep", default="",
                        help="--sweep for the nats side (the same as --sides nats --sweep)")
    parser.add_argument("--floors", action=argparse.BooleanOptionalAction, default=True,
                        help="after each SQL-only bound, also measure the floors: our relay "
                             "with the broker answered in-process, and broker_lite alone "
                             "(bench/_relay_floors.py; default on)")
    parser.add_argument("--profile", action="store_true",
                        help="sample our relay worker and broker_lite with py-spy (GIL-holding "
                             "samples) during our throughput runs and print where the time "
                             "went; the profiled runs' rates are lower than unprofiled ones")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="give up a throughput run after this long (s)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run (< 60 s): 2000 rows, 1 repetition, 5 s latency "
                             "runs, one peer setting; prints only")
    parser.add_argument("--cases", default=None,
                        help="what to measure, comma-separated: throughput, latency "
                             "(default both, or throughput alone with --sides rocketmq; "
                             "a subset only prints)")
    parser.add_argument("--sides", default="ours,peer",
                        help="whom to measure, comma-separated: ours (our relay to "
                             "broker_lite's native door), rocketmq (our relay with the "
                             "RocketMQ 5 target, to broker_lite in strict proxy mode), nats "
                             "(our relay with the NATS JetStream target, to a private "
                             "nats-server; prints the client's own confirmed-publish rate "
                             "beside it), rabbitmq (our relay with the RabbitMQ target, to a "
                             "private rabbitmq-server; prints aio-pika's own rate beside it), "
                             "peer (faststream-outbox). Saved: ours,peer and ours,rocketmq,peer "
                             "to relay.json; ours,rocketmq to relay-rocketmq.json; a run with "
                             "nats throughput (not --quick) also writes relay-nats.json (its "
                             "floors and ceiling) (default ours,peer; other sets only print)")
    parser.add_argument("--raw-rows", type=int, default=2000,
                        help="with the rocketmq (nats) side: transactions per thread count "
                             "(messages per window size) of the official client's (nats-py's) "
                             "own baseline, run after each rocketmq (nats) throughput run "
                             "(default 2000)")
    parser.add_argument("--enqueue-window", type=float, default=None,
                        help="our on_commit hook's CelerySettings.enqueue_window in seconds "
                             "(default: the library's)")
    parser.add_argument("--listen", action=argparse.BooleanOptionalAction, default=None,
                        help="--listen: our relays are woken by PostgreSQL's NOTIFY and our "
                             "worker listens; --no-listen: our on_commit hook enqueues "
                             "coalesced relay tasks (CelerySettings.listen, "
                             "outbox/celery/listen.py; default: the library's, the wake-up)")
    parser.add_argument("--listen-lanes", type=int, default=None,
                        help="with --listen: our worker's CelerySettings.listen_lanes "
                             "(default: the library's)")
    parser.add_argument("--save-as", default="",
                        help="save the full run as bench/results/relay-NAME.json (and the "
                             "relay-NAME section of bench/README.md) instead of relay.json")
    parser.add_argument("--keep-logs", action="store_true",
                        help="keep bench/results/tmp/relay-PID (child logs) afterwards")
    parser.add_argument("--render", action="store_true",
                        help="only rewrite the README section from bench/results/relay.json")
    # child roles
    for name in ("--db", "--redis", "--broker", "--ready", "--stream", "--topic", "--out",
                 "--side", "--mode"):
        parser.add_argument(name, default="", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    for name, default in (("--max-workers", 1), ("--fetch-batch", 10), ("--flush-batch", 1)):
        parser.add_argument(name, type=int, default=default, help=argparse.SUPPRESS)
    parser.add_argument("--min-interval", type=float, default=1.0, help=argparse.SUPPRESS)
    parser.add_argument("--max-interval", type=float, default=10.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    from outbox import RelaySettings

    # given: what our workers are told (None: the target's or the library's default);
    # batch_size and drain_lanes: the ours side's where not given (broker_lite's own
    # relay_tuning over the library's; the SQL bound, the floors and the reports use them)
    args.batch_given, args.lanes_given = args.batch_size, args.drain_lanes
    from outbox.targets.broker_lite import BrokerLiteTarget

    ours = RelaySettings().tuned(**msgspec.structs.asdict(BrokerLiteTarget.relay_tuning))
    args.batch_size = args.batch_size or int(ours.batch_size)
    args.drain_lanes = args.drain_lanes or int(ours.drain_lanes)
    args.sides = [c for c in str(args.sides).split(",") if c]
    if args.cases is None:
        args.cases = "throughput" if args.sides == ["rocketmq"] else "throughput,latency"
    args.cases = [c for c in str(args.cases).split(",") if c]
    if set(args.cases) - {"throughput", "latency"} or set(args.sides) - {*SIDES, "rabbitmq"}:
        parser.error("--cases takes throughput,latency and --sides takes "
                     f"{','.join(SIDES)},rabbitmq")
    # the rocketmq side alone is its throughput over the official client's (no latency)
    client_only = frozenset(args.sides) == {"rocketmq"} and "throughput" in args.cases
    args.restricted = (set(args.cases) != {"throughput", "latency"} and not client_only) or \
        frozenset(args.sides) not in SAVED_SIDES
    if args.quick:
        args.rows, args.repeat, args.seconds, args.lat_repeat = 2000, 1, 5.0, 1
        args.floor_rate = 0.0
        args.peer_configs = args.peer_configs.split(",")[-2]
    return args
