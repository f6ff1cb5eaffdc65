"""Fixtures of the integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jobledger._storage.postgres.store import PostgresStore
from tests.conformance.conftest import PG_DSN, new_schema_name, require_postgres


@pytest.fixture
def pg_store() -> Iterator[PostgresStore]:
    """A PostgreSQL store in a fresh schema (skipped without a server outside CI),
    dropped afterwards."""
    import psycopg

    require_postgres()
    schema = new_schema_name()
    st = PostgresStore(PG_DSN, schema=schema, listen=False)
    try:
        yield st
    finally:
        st.close()
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
