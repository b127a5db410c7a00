"""uvicorn's httptools protocol with the bounds it lacks: request head size, header count, and time.

httptools (llhttp) has no header limit of its own and uvicorn adds none: a client streaming an endless header made
the process hold everything it sent (httptools also re-concatenates a header value for every piece of it, so the
CPU grew quadratically), and a connection that never finished its head or body, or never sent anything, was held
forever. This subclass counts the bytes of each head before they reach the parser, counts the fields, refuses a
field (or request line) over S3's 8 KiB, and keeps three timers: idle (a new connection that sends nothing:
keep_alive_s, as uvicorn already does between requests), head (a request head must complete within header_timeout_s
once begun) and body idle (body_idle_timeout_s without a byte of body while the service is reading). Time spent
answering a request is never limited.

On the common path -- a whole head under 8 KiB arriving in one read, a GET without a body -- no timer is armed and
no field is looked at again: the checks are a counter and a few flags.
"""
from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .config import ServiceSettings


MAX_FIELD_BYTES = 8192  # S3 answers 400 for a header field over 8 KiB


class HeadTooLarge(Exception):
    pass


def error_response(status: str, code: str, message: str) -> bytes:
    """A whole HTTP/1.1 error answer that closes the connection, with an S3-style XML body: the same shape the S3
    gateway answers its errors in (clients of the other services only look at the status)."""
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message>'
            f'</Error>').encode()
    return (f"HTTP/1.1 {status}\r\ncontent-type: application/xml\r\ncontent-length: {len(body)}\r\n"
            f"connection: close\r\n\r\n").encode() + body


HEAD_TOO_LARGE = error_response("400 Bad Request", "RequestHeaderSectionTooLarge",
                                "Your request header section exceeds the maximum allowed size.")
REQUEST_TIMEOUT = error_response("400 Bad Request", "RequestTimeout", "Your socket connection to the server was "
                                 "not read from or written to within the timeout period.")


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    # set per service by protocol_for(settings)
    max_header_bytes = 16384
    max_header_count = 100
    header_timeout_s = 30.0
    body_idle_timeout_s = 60.0

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._reading_head = True  # between two requests or inside a head: what arrives is head bytes
        self._head_bytes = 0
        self._in_head = False  # the parser began a message and has not seen its whole head
        self._too_large = False
        self._heads = 0  # request heads parsed on this connection
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._body_rx = 0.0  # loop time body bytes last arrived

    # -------------------------------------------------------------- connection
    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        # uvicorn arms its keep-alive timer only after a response; a connection that never sends is idle too
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def connection_lost(self, exc) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._reading_head:  # body bytes (or bytes after a request whose response is under way)
            self._body_rx = self.loop.time()
            super().data_received(data)
            return
        room = self.max_header_bytes - self._head_bytes
        if len(data) <= room:
            self._head_bytes += len(data)
            super().data_received(data)
        else:  # parse no more than the limit allows; if the head is complete by then, the rest is its body
            self._head_bytes = self.max_header_bytes
            data = memoryview(data)  # httptools parses a memoryview in place: the slices copy nothing
            heads = self._heads
            super().data_received(data[:room])
            if self._heads == heads and not self.transport.is_closing():
                self._too_large = True
                self.send_400_response("")
                return
            if self.parser is not None and not self.transport.is_closing():
                self._body_rx = self.loop.time()
                super().data_received(data[room:])
        if self.transport.is_closing():
            return
        if self._head_timer is None and self._head_begun():
            self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timeout)
        elif (not self._reading_head and self._body_timer is None and self.cycle is not None
              and self.cycle.more_body):
            self._body_rx = self.loop.time()
            self._body_timer = self.loop.call_later(self.body_idle_timeout_s, self._body_timeout)

    def send_400_response(self, msg: str) -> None:
        if not self._too_large:  # a malformed request: uvicorn's own answer
            super().send_400_response(msg)
            return
        self.transport.write(HEAD_TOO_LARGE)
        self.transport.close()

    # -------------------------------------------------------------- parser callbacks
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True

    def on_headers_complete(self) -> None:
        if len(self.headers) > self.max_header_count or self._head_bytes > MAX_FIELD_BYTES and self._long_field():
            self._too_large = True
            raise HeadTooLarge  # httptools stops parsing; uvicorn answers with send_400_response
        self._in_head = self._reading_head = False
        self._heads += 1
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().on_headers_complete()

    def _long_field(self) -> bool:
        """A request line or header field over S3's 8 KiB (only looked for in a head that big)."""
        return len(self.url) > MAX_FIELD_BYTES or any(len(k) + len(v) > MAX_FIELD_BYTES for k, v in self.headers)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._reading_head = True
        self._head_bytes = 0
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    # -------------------------------------------------------------- timers
    def _cancel_timers(self) -> None:
        for t in (self._head_timer, self._body_timer):
            if t is not None:
                t.cancel()
        self._head_timer = self._body_timer = None

    def _head_begun(self) -> bool:
        """Some of a request head is here (perhaps only the blank lines before it) and not all of it."""
        return self._in_head or self._reading_head and self._head_bytes > 0

    def _head_timeout(self) -> None:
        self._head_timer = None
        if not self._head_begun() or self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:  # a pipelined head behind a response
            self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timeout)
            return
        self.transport.close()

    def _body_timeout(self) -> None:
        self._body_timer = None
        cycle = self.cycle
        if self._reading_head or cycle is None or not cycle.more_body or self.transport.is_closing():
            return
        now = self.loop.time()
        if self.flow.read_paused or cycle.waiting_for_100_continue:
            self._body_rx = now  # the service is not reading (yet): the client is not the one stalling
        idle = now - self._body_rx
        if idle < self.body_idle_timeout_s:
            self._body_timer = self.loop.call_later(self.body_idle_timeout_s - idle, self._body_timeout)
            return
        if not cycle.response_started:  # what S3 answers; the handler then sees the client disconnected
            self.transport.write(REQUEST_TIMEOUT)
        self.transport.close()


def protocol_for(settings: ServiceSettings) -> type[BoundedHttpToolsProtocol]:
    """The protocol class with this service's limits."""
    return type("HttpProtocol", (BoundedHttpToolsProtocol,), {
        "max_header_bytes": settings.max_header_bytes, "max_header_count": settings.max_header_count,
        "header_timeout_s": settings.header_timeout_s, "body_idle_timeout_s": settings.body_idle_timeout_s})
