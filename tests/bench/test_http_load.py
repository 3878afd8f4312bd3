"""The load generator's HTTP client (bench/http_load.py) against a real aiohttp server:
what it sends is what the server reads, answers come back in the requests' order, keep-alive
connections are reused and reopened when the server closes one, and a dropped connection
fails the run."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from aiohttp.http import SERVER_SOFTWARE

from bench.http_load import Request, encode, post_all


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []

    async def echo(request: web.Request) -> web.Response:
        body = await request.read()
        seen.append({
            "path": request.path,
            "key": request.headers.get("Idempotency-Key", ""),
            "type": request.content_type,
            "body": body.decode(),
            "peer": str(request.transport.get_extra_info("peername") if request.transport
                        else ""),
        })
        if request.headers.get("Idempotency-Key") == "close":
            return web.Response(status=201, body=body, headers={"Connection": "close"})
        if request.headers.get("Idempotency-Key") == "drop":
            assert request.transport is not None
            request.transport.close()
            raise web.HTTPBadRequest()
        status = 409 if body == b'{"n": 2}' else 201
        return web.Response(status=status, body=b"[" + body + b"]")

    app = web.Application()
    app.router.add_post("/v1/workloads", echo)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}", seen
    await runner.cleanup()


async def test_answers_come_back_in_order_on_reused_connections(
    server: tuple[str, list[dict[str, str]]],
) -> None:
    base, seen = server
    requests = [
        Request("/v1/workloads", f'{{"n": {i}}}'.encode(), (("Idempotency-Key", f"k-{i}"),))
        for i in range(40)
    ]
    answers, took = await post_all(base, requests, clients=4)
    assert [a.status for a in answers] == [409 if i == 2 else 201 for i in range(40)]
    assert [a.body for a in answers] == [b"[" + r.body + b"]" for r in requests]
    assert all(a.seconds > 0 for a in answers) and took > 0
    assert sorted(s["key"] for s in seen) == sorted(f"k-{i}" for i in range(40))
    assert {s["type"] for s in seen} == {"application/json"}
    assert len({s["peer"] for s in seen}) == 4  # four keep-alive connections, no more


async def test_a_connection_the_server_closes_is_opened_again(
    server: tuple[str, list[dict[str, str]]],
) -> None:
    base, seen = server
    requests = [Request("/v1/workloads", b"{}", (("Idempotency-Key", "close"),))] * 3
    answers, _ = await post_all(base, requests, clients=1)
    assert [a.status for a in answers] == [201, 201, 201]
    assert len({s["peer"] for s in seen}) == 3


async def test_a_dropped_connection_fails_the_run(
    server: tuple[str, list[dict[str, str]]],
) -> None:
    base, _ = server
    requests = [Request("/v1/workloads", b"{}", (("Idempotency-Key", "drop"),))]
    with pytest.raises(ConnectionError):
        await post_all(base, requests, clients=1)


def test_the_request_on_the_wire() -> None:
    wire = encode("h:1", Request("/p", b'{"a": 1}', (("Idempotency-Key", "x"),)))
    assert wire == (
        b"POST /p HTTP/1.1\r\nHost: h:1\r\nContent-Type: application/json\r\n"
        b"Idempotency-Key: x\r\nAccept: */*\r\nAccept-Encoding: gzip, deflate\r\n"
        b"User-Agent: " + SERVER_SOFTWARE.encode() + b"\r\n"
        b'Content-Length: 8\r\n\r\n{"a": 1}'
    )


async def test_the_request_is_the_one_aiohttp_sends() -> None:
    """The server's work is the same for either client: the same bytes arrive."""
    got: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        got.append(await reader.readuntil(b'"a": 1}'))
        writer.write(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    request = Request("/v1/workloads", b'{"a": 1}', (("Idempotency-Key", "k"),))
    headers = {"Content-Type": "application/json", "Idempotency-Key": "k"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{base}{request.path}", data=request.body, headers=headers) as resp,
    ):
        await resp.read()
    await post_all(base, [request], clients=1)
    server.close()
    assert got[0] == got[1]
