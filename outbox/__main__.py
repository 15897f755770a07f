"""``python -m outbox``: the same entry point as the ``rocketbox`` script."""

from __future__ import annotations

import sys

from outbox.cli import main

if __name__ == "__main__":
    sys.exit(main())
