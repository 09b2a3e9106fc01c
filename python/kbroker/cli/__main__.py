"""`python -m kbroker.cli`: the ``kbroker`` command."""

from kbroker.cli import main

main()
