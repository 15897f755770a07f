"""``python -m broker_lite``: the same entry point as the ``broker-lite`` script."""

from __future__ import annotations

import sys

from broker_lite.cli import main

if __name__ == "__main__":
    sys.exit(main())
