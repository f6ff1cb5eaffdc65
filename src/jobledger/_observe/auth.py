"""Who is asking: the console's tokens and roles (DESIGN.md §8.9).

A token is `NAME:SECRET` with a role: an operator may do everything the server allows
(`allow_actions`), a viewer may read. The name is who the audit log says acted; the
secret is what a request presents.

Invariants:

* A request's principal is decided once, by `http.py`'s guard, before any route runs,
  and put in the ASGI scope; routes and templates read it with `principal_of` and
  `can_act` and never look at credentials themselves.
* With no tokens at all the server is a loopback-only viewer (`ANONYMOUS`): it cannot
  act, whatever `allow_actions` says (`create_app` refuses that combination anyway).
* Secrets are compared with `hmac.compare_digest` against every token, not stopping at
  the first match, so the time a comparison takes does not say which token is close.
* Names and secrets hold no whitespace or control characters (a secret is read from a
  command line, a header and a cookie, which would each mangle them differently); names
  are unique, and so are secrets (one secret must not mean two roles).
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from starlette.requests import HTTPConnection

__all__ = [
    "ANONYMOUS",
    "ApiToken",
    "Principal",
    "Role",
    "can_act",
    "check_tokens",
    "match_secret",
    "parse_token",
    "principal_of",
]

Role = Literal["operator", "viewer"]
SCOPE_KEY = "jobledger.principal"
_NAME = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
_SECRET = re.compile(r"[\x21-\x7e]{1,512}")  # printable ASCII: header- and cookie-safe


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    role: Role


ANONYMOUS = Principal("anonymous", "viewer")


@dataclass(frozen=True, slots=True)
class ApiToken:
    name: str
    secret: str
    role: Role

    @property
    def principal(self) -> Principal:
        return Principal(self.name, self.role)

    def __repr__(self) -> str:  # never print a secret
        return f"ApiToken(name={self.name!r}, role={self.role!r})"


def parse_token(value: str, role: Role) -> ApiToken:
    """`NAME:SECRET`, or a bare `SECRET` (named after its role: "operator", "viewer").
    ValueError with the reason for anything else."""
    name, sep, secret = value.partition(":")
    if not sep:
        name, secret = role, value
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"the token name {name[:70]!r} must be 1-64 letters, digits or _ . @ - "
            "(the form is NAME:SECRET)"
        )
    if not _SECRET.fullmatch(secret):
        raise ValueError(
            f"the secret of token {name!r} must be 1-512 printable ASCII characters without spaces"
        )
    return ApiToken(name, secret, role)


def check_tokens(tokens: Iterable[ApiToken]) -> tuple[ApiToken, ...]:
    """The tokens, or ValueError for a repeated name or secret."""
    out = tuple(tokens)
    names = [t.name for t in out]
    for name in set(names):
        if names.count(name) > 1:
            raise ValueError(f"the token name {name!r} is given twice")
    secrets = [t.secret for t in out]
    if len(set(secrets)) != len(secrets):
        raise ValueError("two tokens have the same secret")
    return out


def match_secret(tokens: Sequence[ApiToken], presented: str) -> ApiToken | None:
    found: ApiToken | None = None
    given = presented.encode()
    for token in tokens:
        if hmac.compare_digest(given, token.secret.encode()):
            found = token
    return found


def principal_of(conn: HTTPConnection) -> Principal:
    """Who sent this request (set by the guard; `ANONYMOUS` outside it)."""
    found = conn.scope.get(SCOPE_KEY)
    return found if isinstance(found, Principal) else ANONYMOUS


def can_act(conn: HTTPConnection) -> bool:
    """Whether this request may take actions: the server allows them and it comes from
    an operator."""
    return bool(getattr(conn.app.state, "allow_actions", False)) and (
        principal_of(conn).role == "operator"
    )
