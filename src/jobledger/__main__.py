"""`python -m jobledger` is the `jobledger` command (as is `python -m jobledger.cli`)."""

from jobledger.cli import main

main()
