"""rocketbox's outbox side.

Will hold the status table, the ``publish`` API, the Celery relay and sweeper,
the check-back responder and the consumer inbox (see DESIGN.md §2, flows A-D).
"""
