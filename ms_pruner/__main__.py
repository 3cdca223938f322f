"""``python -m ms_pruner`` is the ``ms-pruner`` command."""

import sys

from .cli import main

sys.exit(main())
