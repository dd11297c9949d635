#!/usr/bin/python3
"""delay_relay.py - a TCP relay that adds a fixed one-way delay.

Listens on --listen HOST:PORT; for each connection dials --to HOST:PORT and
copies bytes both ways, holding every chunk read for --delay-ms before it is
written on (order kept, no coalescing across the delay). A round trip through
the relay therefore gains 2 x delay. Used by netsim.sh where netem is not
available: point clients at the relay's address instead of the server's.

  delay_relay.py --listen 0.0.0.0:7100 --to 10.77.0.1:7001 --delay-ms 5
"""
import argparse
import asyncio
import time


async def pump(reader, writer, delay):
    q = asyncio.Queue()

    async def sender():
        while True:
            due, data = await q.get()
            if data is None:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        try:
            writer.write_eof()
        except OSError:
            pass

    task = asyncio.ensure_future(sender())
    try:
        while True:
            data = await reader.read(1 << 16)
            if not data:
                break
            q.put_nowait((time.monotonic() + delay, data))
    except OSError:
        pass
    q.put_nowait((0, None))
    try:
        await task
    except OSError:
        pass


async def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--listen", required=True, help="HOST:PORT to accept on")
    ap.add_argument("--to", required=True, help="HOST:PORT to forward to")
    ap.add_argument("--delay-ms", type=float, default=0.0)
    a = ap.parse_args()
    lh, lp = a.listen.rsplit(":", 1)
    th, tp = a.to.rsplit(":", 1)
    delay = a.delay_ms / 1000.0

    async def handle(cr, cw):
        try:
            sr, sw = await asyncio.open_connection(th, int(tp))
        except OSError:
            cw.close()
            return
        await asyncio.gather(pump(cr, sw, delay), pump(sr, cw, delay))
        cw.close()
        sw.close()

    srv = await asyncio.start_server(handle, lh, int(lp))
    async with srv:
        await srv.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
