"""``rocketbox demo`` / ``make demo`` / ``python -m examples.demo``: the whole path end to end.

On a fresh checkout it needs nothing but the virtualenv: SQLite for the
databases, broker_lite started here, and Celery on kombu's SQLAlchemy
transport (a SQLite file). In ``.demo/`` (wiped first, so it runs again) it

1. starts broker_lite (fast check-back: ``--tx-timeout 1``), migrates the
   shop's and the inventory's databases, and starts the check-back
   responder, the inventory consumer (inbox), the relay worker (Celery, with
   the demo's crash hook) and the Flask shop on a free port;
2. sends ``--orders`` orders over HTTP with a progress bar: most succeed,
   some fail and roll back (an unknown item answers 422, too many items 409),
   and a few (refs ``crash-...``) make the relay kill itself (the shop's
   ``relay --demo-crash-dir`` hook): the relay sends the halves of the whole
   batch its sweeper claimed, then dies before ending any of them, so the
   broker's check-back commits every transaction of that batch, not only the
   ``crash-`` order. A killed relay is restarted (:class:`parts.RelaySupervisor`,
   which also measures how long the relay was down); the summary splits the
   broker's commit records into those the relay ended and those check-back
   committed, which add up;
3. waits until the inventory has consumed every committed order;
4. audits: every committed status row has exactly one commit record in the
   broker (``broker-lite inspect``), no record mentions a rolled-back order,
   the inventory reserved every committed order once and nothing else; then,
   when pyspark and Java are there (not with ``--quick`` unless ``--spark
   on``), the Spark audit ``spark.audit_job`` over the same files, with a
   latency SLO of :data:`audit.BASE_SLO` plus the kill period (from the first
   relay death to the last restarted relay's ``ready.``): the demo kills the
   relay on purpose, a restart on a busy machine takes seconds (it imports
   and starts a Celery worker), and the kills come one after another, so
   transactions committed in that period wait through it by design, not by a
   fault. It runs with ``--grace 0`` (every order was consumed, so nothing is
   in flight and no row is left ``pending``: "clean" judges every row) and a
   fixed ``--as-of``, and the demo prints that command whole on one line
   (``audit it again: rocketbox audit ...``), so running it later says the
   same. Without Java or the SQLite JDBC driver the audit is skipped with one
   whole line naming what to install;
5. prints a summary table and, last, one line
   ``demo: committed=C rolled_back=R consumed=C divergences=D``, where D
   counts divergent transactions (and orders), not kinds of divergence.

Every process is a :class:`procgroup.Process`: its own process group, a log
in ``.demo/logs/``, stopped with SIGTERM, then SIGKILL. Exit status 0 when the
audit found no divergence, 1 otherwise, 2 when the demo could not run.

It lives in the source checkout, not in the installed library: it runs
``examples/flask_shop`` and ``spark/`` (as subprocesses) and the checkout's
``procgroup``. ``rocketbox demo`` (:mod:`outbox.demo`) finds the checkout and
runs this package; from a wheel without the checkout it says what it needs.
"""
