"""Alembic migrations for the rocketbox tables (env.py and versions/)."""
