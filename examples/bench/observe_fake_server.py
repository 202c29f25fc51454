#!/usr/bin/env python3
"""A trivial OpenAI-compatible endpoint for measuring `blis observe`'s own
CPU per request (examples/bench/observe-cpu.sh): every POST gets at once
an SSE stream of CHUNKS token chunks, a finish chunk and a usage chunk
(or, when the body says "stream": false, one JSON body). Keep-alive,
asyncio, 127.0.0.1 only. Stops after --seconds.

Usage: observe_fake_server.py PORT [CHUNKS] [SECONDS]
"""
import asyncio
import json
import sys

PORT = int(sys.argv[1])
CHUNKS = int(sys.argv[2]) if len(sys.argv) > 2 else 8
SECONDS = float(sys.argv[3]) if len(sys.argv) > 3 else 600


def sse_body():
    parts = []
    for i in range(CHUNKS):
        parts.append({"choices": [{"index": 0, "text": " tok", "finish_reason": None}]})
    parts.append({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]})
    parts.append({"choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": CHUNKS}})
    text = "".join(f"data: {json.dumps(p)}\n\n" for p in parts) + "data: [DONE]\n\n"
    return text.encode()


SSE = sse_body()
WHOLE = json.dumps({"choices": [{"index": 0, "text": " tok" * CHUNKS, "finish_reason": "length"}],
                    "usage": {"prompt_tokens": 40, "completion_tokens": CHUNKS}}).encode()


async def handle(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            body = await reader.readexactly(length) if length else b""
            stream = b'"stream":true' in body.replace(b" ", b"")
            if stream:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n")
                writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(SSE), SSE))
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(WHOLE), WHOLE))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", PORT)
    async with server:
        await asyncio.sleep(SECONDS)


asyncio.run(main())
