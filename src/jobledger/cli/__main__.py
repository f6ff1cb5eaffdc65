"""`python -m jobledger.cli` is the `jobledger` command."""

from jobledger.cli import main

main()
