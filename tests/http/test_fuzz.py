"""Property-based fuzzing of the HTTP API from its own OpenAPI schema (schemathesis).

Every operation gets generated requests, valid and invalid (negative mode mutates
parameters against the schema). Whatever comes in, the server never answers 5xx, and
every answer matches the status codes, content types and response schemas that
`/openapi.json` documents. The schema is the one the server serves (`openapi_schema()`),
loaded at import; requests go to the real uvicorn server of `base_url`.
"""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.config import (
    GenerationConfig,
    ProjectConfig,
    ProjectsConfig,
    SchemathesisConfig,
)

from jobledger._observe.openapi import openapi_schema
from tests.http.conftest import Populated

schema = schemathesis.openapi.from_dict(
    openapi_schema(),
    config=SchemathesisConfig(
        projects=ProjectsConfig(
            default=ProjectConfig(
                generation=GenerationConfig(
                    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE]
                ),
            )
        )
    ),
)


@schema.parametrize()
@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_api_never_fails_and_matches_its_schema(
    case: Any, base_url: str, populated: Populated
) -> None:
    case.call_and_validate(
        base_url=base_url,
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
        ],
        timeout=10,
    )
