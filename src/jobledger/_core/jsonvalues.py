"""Why a value would not come back from its stored JSON as it went in.

Serializers do not refuse everything that breaks a row later: pydantic writes NaN and
infinities as `null`, replaces a lone surrogate in a `dict[str, ...]` key with U+FFFD,
and both it and `json.dumps` turn `{1: "a", "1": "b"}` into an object with one key
twice. `problem(value)` finds these in one walk; callers run it only where the
serializer's output says it may be needed (see `JobType.encode`), or on values that are
small by contract (metadata).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from pydantic import BaseModel

from jobledger._core.limits import SURROGATE

__all__ = ["problem"]


_SURROGATE_TEXT = "a string holds a lone surrogate, which is not UTF-8"
_NOT_FINITE = "NaN and infinite numbers are not JSON"


def problem(value: object) -> str | None:
    """The first reason `value` is not faithful JSON, or None.

    Iterative, so a deep value cannot hit the recursion limit here. Scalars inside a
    dict or list are judged in place rather than pushed: this runs on every payload of a
    loose type (`dict[str, Any]`), so the common flat dict costs one loop.
    """
    stack: list[Any] = [value]
    pop, push, surrogate = stack.pop, stack.append, SURROGATE.search
    while stack:
        v = pop()
        t = type(v)
        if t is dict or t is list:
            mixed = False
            for k, x in v.items() if t is dict else enumerate(v):
                if t is dict:
                    if type(k) is not str:
                        mixed = True
                    elif not k.isascii() and surrogate(k):  # isascii is O(1)
                        return "a key holds a lone surrogate, which is not UTF-8"
                tx = type(x)
                if tx is str:
                    if not x.isascii() and surrogate(x):
                        return _SURROGATE_TEXT
                elif tx is float:
                    if x - x != 0.0:  # NaN and +-inf are the floats for which this holds
                        return _NOT_FINITE
                elif not (tx is int or tx is bool or x is None):
                    push(x)
            if mixed:
                clash = _key_problem(v)
                if clash is not None:
                    return clash
        elif t is str:
            if not v.isascii() and surrogate(v):
                return _SURROGATE_TEXT
        elif t is float:
            if v - v != 0.0:
                return _NOT_FINITE
        elif t is int or t is bool or v is None:
            continue
        elif isinstance(v, dict):
            clash = _key_problem(v)
            if clash is not None:
                return clash
            stack.extend(v.keys())  # a str or float subclass key is judged as a value
            stack.extend(v.values())
        elif isinstance(v, list | tuple | set | frozenset):
            stack.extend(v)
        elif isinstance(v, BaseModel):
            stack.extend(v.__dict__.values())
            if v.__pydantic_extra__:
                stack.extend(v.__pydantic_extra__.values())
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):
            stack.extend(getattr(v, f.name) for f in dataclasses.fields(v))
        elif isinstance(v, str):
            push(str(v))
        elif isinstance(v, float):
            push(float(v))
    return None


def _key_problem(d: dict[Any, Any]) -> str | None:
    surrogate = SURROGATE.search
    for k in d:
        if type(k) is str and not k.isascii() and surrogate(k):
            return "a key holds a lone surrogate, which is not UTF-8"
    seen: set[str] = set()
    for k in d:
        if type(k) is str:
            forms: tuple[str, ...] = (k,)
        elif isinstance(k, float) and k - k != 0.0:
            return _NOT_FINITE
        else:
            # Serializers differ on how a non-str key is written (json: `null`, `true`;
            # pydantic: `None`); a clash under either is a duplicate key in one of them.
            forms = (str(k), json.dumps(k) if isinstance(k, int | float | None) else str(k))
        if any(f in seen for f in forms):
            return f"two keys are both written as {forms[0]!r} in JSON"
        seen.update(forms)
    return None
