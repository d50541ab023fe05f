"""``python -m ggtts.server``: the same as ``ggtts serve``."""

import sys

from ggtts.server import main

sys.exit(main())
