#!/usr/bin/env python3
"""A TCP proxy that holds each chunk a client sends for DELAY seconds before
passing it on: a memoryd far away, or slow to answer. Standard library only.
Usage: slow_proxy.py LISTEN_PORT UPSTREAM_PORT DELAY_SECONDS (both on 127.0.0.1)."""

import asyncio
import sys


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    try:
        while data := await reader.read(65536):
            if delay:
                await asyncio.sleep(delay)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def main(listen: int, upstream: int, delay: float) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", upstream)
        await asyncio.gather(pipe(client_r, up_w, delay), pipe(up_r, client_w, 0))

    server = await asyncio.start_server(handle, "127.0.0.1", listen)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])))
