"""The clients' types, as a user's type checker sees them (mypy checks this
file: ``tool.mypy`` in pyproject.toml) and as code inspecting them at run
time does."""

import inspect
from collections.abc import Coroutine
from typing import Any, assert_type

from memoryd import AsyncMemoryd, Memoryd, models


async def _what_a_type_checker_sees(sync: Memoryd, concurrent: AsyncMemoryd) -> None:
    assert_type(sync.get_job("job"), models.Job)
    assert_type(sync.list_layouts(), list[models.Layout])
    assert_type(sync.get_instructions(), models.Instructions | None)
    assert_type(sync.health(), dict[str, Any])
    assert_type(await concurrent.get_job("job"), models.Job)
    await assert_type(concurrent.get_file("MEMORY.md"), Coroutine[Any, Any, str])


def test_the_async_clients_routes_are_coroutine_functions() -> None:
    concurrent = AsyncMemoryd("http://127.0.0.1:9", "k")
    sync = Memoryd("http://127.0.0.1:9", "k")
    for name in ("get_job", "append_segment", "close_session", "get_instructions", "export_workspace", "events"):
        assert not inspect.iscoroutinefunction(getattr(sync, name)), name
    for name in ("get_job", "append_segment", "close_session", "get_instructions", "export_workspace"):
        assert inspect.iscoroutinefunction(getattr(concurrent, name)), name
    assert inspect.signature(concurrent.close_session) == inspect.signature(sync.close_session)
    assert "queue its memory jobs" in (AsyncMemoryd.close_session.__doc__ or "")
    assert concurrent.get_job.__name__ == "get_job"
    sync.close()
