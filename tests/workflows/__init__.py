"""Workflows (DESIGN §8.8) on real databases: every test takes the `db` fixture and runs
on both backends."""
