"""``python -m ssmviz``: the same as the ``ssmviz`` command."""

from ssmviz.entry import entry

entry()
