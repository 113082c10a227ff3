#!/usr/bin/python3
"""A TCP proxy for fault campaigns: forwards connections from --listen to --to,
and, with a seeded probability, misbehaves the way networks do:

  --drop P        each forwarded chunk of bytes (either direction) is, with
                  probability P, the last: both sides of the connection are
                  closed mid-stream (a request cut off, a reply lost)
  --delay-ms A-B  each chunk is held A..B ms before it is passed on
  --delay P       probability of that delay (default 1)
  --seed N        decisions are repeatable for a seed

Without --drop and --delay it is a plain forwarder (used to reach a loopback
server from another network namespace). Prints "listening HOST:PORT" once
ready, then runs until killed; on SIGTERM prints its counters:
  connections N  chunks N  dropped N  delayed N
"""
import argparse
import asyncio
import os
import random
import signal
import sys


def parse_addr(text):
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


class Proxy:
    def __init__(self, args):
        self.target = parse_addr(args.to)
        self.drop = args.drop
        lo, _, hi = args.delay_ms.partition("-")
        self.delay_lo, self.delay_hi = int(lo or 0), int(hi or lo or 0)
        self.delay_p = args.delay
        self.rng = random.Random(args.seed)
        self.counts = {"connections": 0, "chunks": 0, "dropped": 0, "delayed": 0}

    async def pump(self, reader, writer, peer_writer):
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                self.counts["chunks"] += 1
                if self.delay_hi > 0 and self.rng.random() < self.delay_p:
                    self.counts["delayed"] += 1
                    await asyncio.sleep(self.rng.uniform(self.delay_lo, self.delay_hi) / 1000.0)
                if self.drop > 0 and self.rng.random() < self.drop:
                    self.counts["dropped"] += 1
                    # Half of the chunk gets through: a torn request or reply.
                    writer.write(data[: len(data) // 2])
                    break
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            for w in (writer, peer_writer):
                try:
                    w.close()
                except Exception:  # noqa: BLE001 - closing a broken socket
                    pass

    async def handle(self, client_reader, client_writer):
        self.counts["connections"] += 1
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.target)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            self.pump(client_reader, server_writer, client_writer),
            self.pump(server_reader, client_writer, server_writer),
        )


async def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--listen", required=True, help="HOST:PORT to accept on (PORT 0: any free port)")
    ap.add_argument("--to", required=True, help="HOST:PORT to forward to")
    ap.add_argument("--drop", type=float, default=0.0)
    ap.add_argument("--delay-ms", default="0")
    ap.add_argument("--delay", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    proxy = Proxy(args)
    host, port = parse_addr(args.listen)
    server = await asyncio.start_server(proxy.handle, host, port)
    bound = server.sockets[0].getsockname()
    print(f"listening {bound[0]}:{bound[1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()
        print(" ".join(f"{k} {v}" for k, v in proxy.counts.items()), flush=True)
    os._exit(0)  # connections still open die with the process


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
