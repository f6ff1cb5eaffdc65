"""Schedules without jobs: pure triggers (`triggers`) and in-memory timers (`scheduler`)."""
