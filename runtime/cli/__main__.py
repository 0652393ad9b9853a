"""``python -m stowage.cli``: the same as the ``stowage`` command."""

import sys

from . import main

sys.exit(main())
