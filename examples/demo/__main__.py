"""``python -m examples.demo``: what ``rocketbox demo`` runs from a source checkout."""

from __future__ import annotations

import sys

from examples.demo.run import main

sys.exit(main())
