"""asyncio support for ferry.Future: ``await file.pread(buf)``."""

from __future__ import annotations

import asyncio


def await_future(future):
    """The iterator behind ``Future.__await__``: waits for the request on the event loop's
    default executor, so the loop keeps running while the I/O does."""
    loop = asyncio.get_running_loop()
    if future.done():
        return _ready(future).__await__()
    return loop.run_in_executor(None, future.result).__await__()


async def _ready(future):
    return future.result()
