"""``python -m conveyor``: the ``conveyor`` command."""

import sys

from conveyor.cli import main

sys.exit(main())
