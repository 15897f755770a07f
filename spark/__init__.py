"""The Spark consistency audit: outbox tables joined with broker_lite's commit log."""
