"""Integrations with other frameworks, each behind its own extra: `asgi` (Starlette,
FastAPI lifespans) and `django` (a `django.tasks` backend).

Nothing here is imported by `jobledger` itself: a subpackage is loaded only when the
user's code (or a framework's settings) names it, so the core keeps no dependency on
the framework it integrates.
"""
