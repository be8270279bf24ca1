"""A tiny TCP key-value store through which the ranks of one run meet.

The server holds bytes by string key; a client can set, wait for, count and
delete keys. Every connection must first prove it holds the run's token
(HMAC of a fresh nonce), so another user's process on the same machine can
neither read the run's objects nor inject its own. The wire format is a
length-prefixed binary frame, never pickle: the server parses only bytes it
can bound, and nothing at all from a peer that has not proved the token.

Frames (big-endian): request ``op:u8 key_len:u32 value_len:u32 key value``;
response ``status:u8 len:u32 payload``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import socket
import struct
import threading
import time

from purlin_bench.procs.errors import DistError, StoreRefused, StoreTimeout, StoreUnreachable

NONCE_BYTES = 32
AUTH_TIMEOUT_S = 5.0
ACCEPT, REFUSE = b"\x01", b"\x00"
MAX_KEY = 1024
# Objects exchanged here are small (addresses, plans, timings); the bound keeps
# one bad frame from making the server allocate without limit.
MAX_VALUE = 64 << 20
MAX_WAIT_S = 3600.0
# Each connection is a thread; a bound keeps a flood of connects from
# exhausting the launcher before any of them has to authenticate.
MAX_CONNECTIONS = 1024
# Connections still to prove the token: a flood of them holds at most this
# many threads, each for at most AUTH_TIMEOUT_S, and never an authenticated
# rank's slot; a client turned away while it is full tries again.
MAX_PENDING = 64
_RETRY_S = 0.05

SET, GET, TRY_GET, ADD, DELETE = 1, 2, 3, 4, 5
OK, MISSING, BAD = 0, 1, 2
_REQ = struct.Struct(">BII")
_RESP = struct.Struct(">BI")


def _proof(token: bytes, nonce: bytes) -> bytes:
    return hmac.new(token, nonce, hashlib.sha256).digest()


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    """``n`` bytes, or None if the peer closed first."""
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class _Drop(Exception):
    """A peer broke the protocol: its connection is closed, nothing else."""


class StoreServer:
    """Serves the store on ``host:port`` (port 0: any free one) until closed.

    Loopback by default: the ranks of a run share one machine, and a store
    nobody else can route to is one less thing the token has to guard."""

    def __init__(self, token: bytes, host: str = "127.0.0.1", port: int = 0):
        if not isinstance(token, bytes) or not token:
            raise DistError("the store's token must be non-empty bytes")
        self._token = token
        self._data: dict[str, bytes] = {}
        self._cond = threading.Condition()
        self._conns: set[socket.socket] = set()
        self._pending = 0  # connections in _conns still to authenticate
        self._closed = False
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            self._listener = socket.create_server((host, port), family=family, backlog=128)
        except OSError as exc:
            raise StoreUnreachable(f"cannot serve the run's store on {host}:{port}: {exc.strerror or exc}") from None
        # A timeout on accept lets the loop notice close() without relying on
        # close() waking a blocked accept, which not every platform does.
        self._listener.settimeout(0.2)
        self.address: tuple[str, int] = tuple(self._listener.getsockname()[:2])
        threading.Thread(target=self._accept_loop, name="purlin-store", daemon=True).start()

    def __enter__(self) -> StoreServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def set(self, key: str, value: bytes) -> None:
        """Set ``key`` from the serving process itself, with no connection:
        the launcher aborts its run this way, because a flood of connections
        that never prove the token can hold every slot a newcomer needs."""
        with self._cond:
            self._data[key] = bytes(value)
            self._cond.notify_all()

    def keys(self) -> list[str]:
        """The keys held now (for tests and diagnostics)."""
        with self._cond:
            return sorted(self._data)

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
            conns = list(self._conns)
        self._listener.close()
        for conn in conns:
            # shutdown wakes the thread blocked in recv on it; close alone may not.
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # the listener was closed
            with self._cond:
                if self._closed or len(self._conns) >= MAX_CONNECTIONS or self._pending >= MAX_PENDING:
                    conn.close()
                    continue
                self._conns.add(conn)
                self._pending += 1
            threading.Thread(target=self._serve, args=(conn,), name="purlin-store-conn", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        pending = True
        try:
            conn.settimeout(AUTH_TIMEOUT_S)
            nonce = secrets.token_bytes(NONCE_BYTES)
            conn.sendall(nonce)
            answer = _recv_exact(conn, NONCE_BYTES)
            if answer is None or not hmac.compare_digest(answer, _proof(self._token, nonce)):
                conn.sendall(REFUSE)
                return
            with self._cond:
                self._pending -= 1
                pending = False
            conn.sendall(ACCEPT)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # An authenticated rank may sit idle between steps for as long as it likes.
            conn.settimeout(None)
            while not self._closed:
                head = _recv_exact(conn, _REQ.size)
                if head is None:
                    return
                op, klen, vlen = _REQ.unpack(head)
                if op not in (SET, GET, TRY_GET, ADD, DELETE) or klen > MAX_KEY or vlen > MAX_VALUE:
                    raise _Drop
                body = _recv_exact(conn, klen + vlen)
                if body is None:
                    return
                try:
                    key = body[:klen].decode("utf-8")
                except UnicodeDecodeError:
                    raise _Drop from None
                status, payload = self._handle(op, key, body[klen:])
                conn.sendall(_RESP.pack(status, len(payload)) + payload)
        except (OSError, _Drop, struct.error):
            pass  # a peer that breaks the protocol or goes away costs only its own connection
        finally:
            with self._cond:
                self._conns.discard(conn)
                self._pending -= pending
            conn.close()

    def _handle(self, op: int, key: str, value: bytes) -> tuple[int, bytes]:
        with self._cond:
            if op == SET:
                self._data[key] = value
                self._cond.notify_all()
                return OK, b""
            if op == TRY_GET:
                found = self._data.get(key)
                return (MISSING, b"") if found is None else (OK, found)
            if op == GET:
                if len(value) != 8:
                    raise _Drop
                wait = struct.unpack(">d", value)[0]
                wait = min(max(wait, 0.0), MAX_WAIT_S) if wait == wait else 0.0  # NaN waits not at all
                self._cond.wait_for(lambda: key in self._data or self._closed, wait)
                found = self._data.get(key)
                return (MISSING, b"") if found is None else (OK, found)
            if op == ADD:
                if len(value) != 8:
                    raise _Drop
                try:
                    total = int(self._data.get(key, b"0")) + struct.unpack(">q", value)[0]
                except ValueError:
                    return BAD, f"key {key!r} holds a value that is not a counter".encode()
                self._data[key] = str(total).encode()
                self._cond.notify_all()
                return OK, self._data[key]
            self._data.pop(key, None)  # DELETE
            return OK, b""


class Store:
    """A client of a :class:`StoreServer`; one lock around each request, so
    threads of one rank may share it."""

    def __init__(self, host: str, port: int, token: bytes, timeout_s: float = 30.0):
        """Connect and prove the token; ``timeout_s`` bounds the whole of it
        (and, later, how long the server may take to answer a request)."""
        self.address = (host, int(port))
        self.timeout_s = float(timeout_s)
        self._lock = threading.Lock()
        self._where = f"{host}:{port}"
        self._token = token  # for another(): a second connection of this process
        deadline = time.monotonic() + self.timeout_s
        while True:
            sock = self._greeted(deadline)
            if sock is not None:
                break
            # Closed before its greeting: the server is full (or closing); again until the timeout.
            if time.monotonic() + _RETRY_S > deadline:
                raise StoreUnreachable(
                    f"the run's store at {self._where} closed every connection before greeting for {self.timeout_s:g} s"
                )
            time.sleep(_RETRY_S)
        sock, nonce = sock
        try:
            sock.settimeout(max(deadline - time.monotonic(), _RETRY_S))
            sock.sendall(_proof(token, nonce))
            verdict = _recv_exact(sock, 1)
        except TimeoutError:
            sock.close()
            raise StoreUnreachable(f"the run's store at {self._where} did not judge this process's token "
                                   f"within {self.timeout_s:g} s") from None
        except OSError as exc:
            sock.close()
            raise StoreUnreachable(f"cannot reach the run's store at {self._where}: {exc.strerror or exc}") from None
        except BaseException:
            sock.close()
            raise
        if verdict != ACCEPT:
            sock.close()
            raise StoreRefused(f"the store at {self._where} refused this process: it does not hold the run's token")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock: socket.socket | None = sock

    def _greeted(self, deadline: float) -> tuple[socket.socket, bytes] | None:
        """A connection and the server's nonce; None if it closed first (full).
        Every step within ``deadline``: something that accepts and never
        greets (not a purlin store, or a frozen one) is one line, not a hang."""
        left = max(deadline - time.monotonic(), _RETRY_S)
        try:
            sock = socket.create_connection(self.address, timeout=left)
        except TimeoutError:
            raise StoreUnreachable(
                f"cannot reach the run's store at {self._where} within {self.timeout_s:g} s"
            ) from None
        except OSError as exc:
            raise StoreUnreachable(f"cannot reach the run's store at {self._where}: {exc.strerror or exc}") from None
        try:
            sock.settimeout(max(deadline - time.monotonic(), _RETRY_S))
            nonce = _recv_exact(sock, NONCE_BYTES)
        except TimeoutError:
            sock.close()
            raise StoreUnreachable(
                f"{self._where} accepted the connection but sent no greeting within {self.timeout_s:g} s: "
                "not the run's store, or one that is stopped"
            ) from None
        except OSError:
            nonce = None
        except BaseException:
            sock.close()
            raise
        if nonce is None:
            sock.close()
            return None
        return sock, nonce

    def another(self) -> Store:
        """A second connection to the same store, with the same bound (a
        thread that must never queue behind this one's long waits)."""
        return Store(*self.address, self._token, timeout_s=self.timeout_s)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def set(self, key: str, value: bytes) -> None:
        self._request(SET, key, bytes(value))

    def get(self, key: str, timeout_s: float) -> bytes:
        """The value of ``key``, waiting (on the server) up to ``timeout_s``."""
        status, payload = self._request(GET, key, struct.pack(">d", timeout_s), wait_s=max(timeout_s, 0.0))
        if status == MISSING:
            raise StoreTimeout(f"key {key!r} did not appear in the run's store within {timeout_s:g} s")
        return payload

    def try_get(self, key: str) -> bytes | None:
        status, payload = self._request(TRY_GET, key, b"")
        return None if status == MISSING else payload

    def add(self, key: str, amount: int = 1) -> int:
        """Add ``amount`` to the counter at ``key`` (0 if absent); the new value."""
        return int(self._request(ADD, key, struct.pack(">q", amount))[1])

    def delete(self, key: str) -> None:
        self._request(DELETE, key, b"")

    def close(self) -> None:
        # Not under the lock: a thread blocked in a long get would hold close
        # up for its whole wait; shutting the socket down wakes it instead.
        self._broken()

    def _request(self, op: int, key: str, value: bytes, wait_s: float = 0.0) -> tuple[int, bytes]:
        raw = key.encode("utf-8")
        if len(raw) > MAX_KEY or len(value) > MAX_VALUE:
            raise DistError(f"key {key[:60]!r}: over the store's bound ({MAX_KEY} B key, {MAX_VALUE >> 20} MiB value)")
        with self._lock:
            if self._sock is None:
                raise StoreUnreachable(f"the client of the run's store at {self._where} is closed")
            sock = self._sock
            try:
                # The bound covers the server's own wait plus a slow answer.
                sock.settimeout(self.timeout_s + wait_s)
                sock.sendall(_REQ.pack(op, len(raw), len(value)) + raw + value)
                head = _recv_exact(sock, _RESP.size)
                status, n = _RESP.unpack(head) if head else (None, 0)
                payload = _recv_exact(sock, n) if head else None
            except TimeoutError:
                self._broken()
                raise StoreUnreachable(
                    f"the run's store at {self._where} did not answer within {self.timeout_s + wait_s:g} s"
                ) from None
            except OSError:
                payload = None
            except BaseException:
                # Interrupted (Ctrl-C) between request and reply: the reply
                # would be read by the next request. Drop the connection.
                self._broken()
                raise
            if payload is None:
                # Half a frame leaves the stream unusable: drop it, so every
                # later call says the same thing instead of reading garbage.
                self._broken()
                raise StoreUnreachable(f"lost the run's store at {self._where}: its launcher or rank 0 has exited")
        if status == BAD:
            raise DistError(payload.decode("utf-8", "replace"))
        return status, payload

    def _broken(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already disconnected
            sock.close()


__all__ = ["Store", "StoreServer"]
