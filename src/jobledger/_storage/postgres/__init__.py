"""The PostgreSQL backend (`pip install jobledger[postgres]`): psycopg 3 + psycopg_pool.

`store.PostgresStore` implements the same named operations as the SQLite store;
`workers` and `leader` mirror `sqlite/workers.py` and `sqlite/leader.py`. Importing this
package needs psycopg; nothing else in jobledger imports it unless PostgreSQL is used.
"""
