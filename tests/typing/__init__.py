"""Static typing of the public API, checked by running mypy on small snippets."""
