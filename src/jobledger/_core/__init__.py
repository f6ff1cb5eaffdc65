"""Pure parts of the engine: states, backoff, the typed registry. No I/O."""
