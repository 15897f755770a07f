"""Web framework integrations for rocketbox (Django and Flask)."""
