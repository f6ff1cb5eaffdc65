"""Observation: the read model shared by the CLI, the HTTP API and the dashboard.

Everything here reads the database through a read-only connection (`mode=ro`); there is
no write path. The HTTP layer (`http.py`) imports Starlette lazily, so the core package
works without the `web` extra.
"""
