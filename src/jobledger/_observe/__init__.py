"""Observation: the read model shared by the CLI, the HTTP API and the dashboard.

Everything here reads the database through a store opened read-only
(`open_store(path_or_url, read_only=True)`: SQLite `mode=ro`, PostgreSQL read-only
sessions), on either backend; there is no write path. The HTTP layer (`http.py`)
imports Starlette lazily, so the core package works without the `web` extra.
"""
