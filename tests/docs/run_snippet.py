"""Run one documentation snippet as a script: `python tests/docs/run_snippet.py FILE`.

Like `python FILE`, except that a top-level `await` is allowed (the snippet is then
run with `asyncio.run`): reference pages show calls such as `await handle.finished`
without the `async def main()` around them, as the asyncio REPL does.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import sys
import types


def main(path: str) -> None:
    with open(path, encoding="utf-8") as f:
        source = f.read()
    code = compile(source, path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    module = types.ModuleType("__main__")
    module.__file__ = path
    sys.modules["__main__"] = module
    sys.argv = [path]  # as `python FILE` leaves it
    sys.path.insert(0, ".")
    result = eval(code, module.__dict__)  # a coroutine when the snippet awaits
    if inspect.iscoroutine(result):
        asyncio.run(result)


if __name__ == "__main__":
    main(sys.argv[1])
