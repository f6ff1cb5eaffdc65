"""The running engine: dispatch, execution, finalize, recovery, lifecycle."""
