"""``python -m ssmviz``: the same as the ``ssmviz`` command."""

import sys

from ssmviz.cli import main

sys.exit(main())
