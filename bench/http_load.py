"""The benchmarks' load generator for HTTP: POST a list of requests over keep-alive
HTTP/1.1 connections, each request's bytes encoded before the clock starts, each answer
parsed by httptools (llhttp, the parser uvicorn uses).

The client shares the machine with the stack it measures, so it should take as little of it
as it can (as wrk or hey do). aiohttp's client took ~0.12 ms of CPU a request on this
machine (its session, request and response objects, and the headers built each time): at
~2,000 requests/s, an eighth of the two cores the stack runs on. What goes over the wire is
what aiohttp sent, byte for byte (``encode``), one request at a time on each of ``clients``
keep-alive connections.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import httptools
from aiohttp.http import SERVER_SOFTWARE as USER_AGENT  # what aiohttp's client says it is


@dataclass(frozen=True, slots=True)
class Request:
    path: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes
    seconds: float  # sent -> answered, on the client's clock


async def post_all(base: str, requests: Sequence[Request], clients: int
                   ) -> tuple[list[Answer], float]:
    """POST every request over ``clients`` keep-alive connections, each connection taking
    the next request once its last one is answered; the answers in the requests' order,
    and the seconds from the first send to the last answer. A connection the server closes
    (``Connection: close``) is opened again; a connection that fails fails the run."""
    url = urlsplit(base)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    wire = [encode(url.netloc, r) for r in requests]
    answers: list[Answer | None] = [None] * len(requests)
    todo = iter(range(len(requests)))
    started = time.perf_counter()
    await asyncio.gather(*(_client(host, port, wire, todo, answers) for _ in range(clients)))
    took = time.perf_counter() - started
    return [a for a in answers if a is not None], took


def encode(netloc: str, request: Request) -> bytes:
    """The request as it goes over the wire (HTTP/1.1, keep-alive is the default): the
    bytes aiohttp's client sends for it, header for header, so the server's work is the
    same (intake compresses no answer, so ``Accept-Encoding`` changes nothing)."""
    lines = [
        f"POST {request.path} HTTP/1.1",
        f"Host: {netloc}",
        "Content-Type: application/json",
        *(f"{name}: {value}" for name, value in request.headers),
        "Accept: */*",
        "Accept-Encoding: gzip, deflate",
        f"User-Agent: {USER_AGENT}",
        f"Content-Length: {len(request.body)}",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + request.body


async def _client(host: str, port: int, wire: list[bytes], todo: Iterator[int],
                  answers: list[Answer | None]) -> None:
    conn: _Connection | None = None
    try:
        for i in todo:
            if conn is None:
                conn = await _Connection.open(host, port)
            sent = time.perf_counter()
            status, body, keep_alive = await conn.exchange(wire[i])
            answers[i] = Answer(status, body, time.perf_counter() - sent)
            if not keep_alive:
                conn.close()
                conn = None
    finally:
        if conn is not None:
            conn.close()


class _Connection(asyncio.Protocol):
    """One keep-alive connection: one request in flight, its answer parsed as it comes."""

    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._body: list[bytes] = []
        self._answer: asyncio.Future[tuple[int, bytes, bool]] | None = None
        self._transport: asyncio.Transport | None = None

    @classmethod
    async def open(cls, host: str, port: int) -> _Connection:
        _, conn = await asyncio.get_running_loop().create_connection(cls, host, port)
        return conn

    async def exchange(self, request: bytes) -> tuple[int, bytes, bool]:
        """Send one request; its (status, body, whether the connection stays open)."""
        assert self._transport is not None
        self._answer = asyncio.get_running_loop().create_future()
        self._transport.write(request)
        return await self._answer

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    # -- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionResetError("the server closed the connection"))

    # -- httptools' callbacks -------------------------------------------------------------

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        body, self._body = b"".join(self._body), []
        answer, self._answer = self._answer, None
        if answer is not None and not answer.done():
            status = self._parser.get_status_code()
            answer.set_result((status, body, self._parser.should_keep_alive()))

    def _fail(self, exc: BaseException) -> None:
        answer, self._answer = self._answer, None
        if answer is not None and not answer.done():
            answer.set_exception(exc)
