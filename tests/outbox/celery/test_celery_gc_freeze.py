"""``gc.freeze()`` runs in rocketbox's own worker only, not in any Celery worker of a process
that imports :mod:`outbox.celery`.

Each case runs in a child interpreter (a frozen heap is process-wide state):
it imports ``outbox.celery``, makes an app, and sends Celery's real
``worker_ready`` (sender: a started worker's consumer, which holds its app)
and ``worker_process_init`` (a pool process, whose current app is its
worker's) the way a starting worker does.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent("""
    import gc, sys
    from celery import Celery
    from celery.signals import worker_process_init, worker_ready
    from sqlalchemy import create_engine
    from outbox import Outbox
    from outbox.celery import make_celery

    if sys.argv[1] == "rocketbox":
        app = make_celery(Outbox(engine=create_engine("sqlite://")),
                          broker_url="memory://")
    else:
        app = Celery("someone-elses", broker="memory://", set_as_current=False)
    class Consumer:  # what worker_ready's sender holds that matters: its app
        def __init__(self, app):
            self.app = app

    gc.unfreeze()
    if sys.argv[2] == "ready":
        worker_ready.send(sender=Consumer(app))
    else:
        app.set_current()
        worker_process_init.send(sender=None)
    print(gc.get_freeze_count())
""")


def _frozen_after(app: str, signal: str) -> int:
    done = subprocess.run([sys.executable, "-c", CHILD, app, signal], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("signal", ["ready", "process_init"])
def test_only_rocketbox_worker_freezes_its_heap(signal: str) -> None:
    assert _frozen_after("other", signal) == 0
    assert _frozen_after("rocketbox", signal) > 0
