#!/usr/bin/env python3
"""A TCP delay line for benchmarks: listens on 127.0.0.1:LISTEN, forwards
to 127.0.0.1:TARGET, and delivers what each side sends RTT_MS/2
milliseconds later, in order (a round trip through it takes RTT_MS more).
usage: delay_proxy.py LISTEN TARGET RTT_MS"""
import asyncio
import sys


async def pipe(reader, writer, delay):
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue()

    async def deliver():
        while True:
            at, data = await queue.get()
            if data is None:
                writer.close()
                return
            wait = at - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()

    task = asyncio.create_task(deliver())
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            queue.put_nowait((loop.time() + delay, data))
    finally:
        queue.put_nowait((0, None))
        await task


async def main(listen, target, rtt_ms):
    delay = rtt_ms / 2000.0

    async def handle(client_r, client_w):
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(pipe(client_r, server_w, delay), pipe(server_r, client_w, delay),
                             return_exceptions=True)

    server = await asyncio.start_server(handle, "127.0.0.1", listen)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])))
