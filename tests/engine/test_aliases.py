"""Payload models with field aliases: `enqueue` stores field names (pydantic's default
dump), and the worker reads a payload back by name or by alias."""

from __future__ import annotations

import asyncio

import pydantic

import jobledger as jl
from jobledger.testing import FakeClock, drain


class Person(pydantic.BaseModel):
    full_name: str = pydantic.Field(alias="fullName")
    age: int = 0


PERSON = jl.JobType("alias.person", Person)


def test_an_aliased_payload_round_trips_through_the_table(db: str) -> None:
    jobs = jl.JobManager(db, clock=FakeClock(), startup_delay=0)
    seen: list[tuple[str, int]] = []

    @jobs.handler(PERSON, recovery="retry")
    async def greet(ctx: jl.JobContext[Person]) -> None:
        seen.append((ctx.payload.full_name, ctx.payload.age))

    async def main() -> list[jl.JobSnapshot]:
        async with jobs:
            jobs.enqueue(PERSON, Person(fullName="Ada Lovelace", age=36))
            # A plain dict in the aliases' form, as a producer without the model writes it.
            jobs.enqueue("alias.person", {"fullName": "Alan Turing", "age": 41})
            return await drain(jobs)

    done = asyncio.run(main())
    assert [s.status for s in done] == ["completed", "completed"]
    assert seen == [("Ada Lovelace", 36), ("Alan Turing", 41)]
