"""`python -m launch`: see launch/cli.py."""

from __future__ import annotations

import sys

from launch.cli import main

sys.exit(main())
