"""Integrations with other frameworks: `jobledger.contrib.asgi` (Starlette, FastAPI)."""
