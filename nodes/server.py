"""ThriftServer: TBinaryProtocol over TFramedTransport on TCP, a thread per connection, bounded.

One acceptor thread; each accepted connection is served on its own worker thread, at most
`workers` at once (one more is closed at once: a clean refusal the client can retry elsewhere).
Frames above `max_frame` close the connection before anything is read into memory; a connection
silent for `idle_timeout` seconds is closed, so a client that connects and sends nothing cannot
hold a worker. `stop()` closes the listener and every connection, and joins every thread.
"""
from __future__ import annotations

import logging
import socket
import threading

from thrift.protocol import TBinaryProtocol
from thrift.Thrift import TException
from thrift.transport import TSocket, TTransport

log = logging.getLogger(__name__)


class ThriftServer:
    def __init__(self, processor, host: str, port: int, *, workers: int, max_frame: int, idle_timeout: float,
                 max_string: int, max_container: int):
        self._processor = processor
        self._host, self._port = host, port
        self._slots = threading.Semaphore(workers)
        self._max_frame = max_frame
        self._idle_timeout = idle_timeout
        # Refused while decoding, before anything is built: a frame of 8 MiB could otherwise claim
        # millions of list elements.
        self._proto = TBinaryProtocol.TBinaryProtocolAcceleratedFactory(
            string_length_limit=max_string, container_length_limit=max_container)
        self._listener: socket.socket | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._conns: dict[threading.Thread, socket.socket] = {}
        self._acceptor: threading.Thread | None = None

    @property
    def port(self) -> int:
        assert self._listener is not None
        return self._listener.getsockname()[1]

    def start(self) -> None:
        ls = socket.create_server((self._host, self._port), backlog=128, reuse_port=False)
        ls.settimeout(0.5)
        self._listener = ls
        self._acceptor = threading.Thread(target=self._accept, name="thrift-acceptor", daemon=True)
        self._acceptor.start()
        log.info("Thrift server listening on %s:%d", self._host, self.port)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._acceptor is not None:
            self._acceptor.join(timeout)
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            conns = dict(self._conns)
        for sock in conns.values():
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in conns:
            thread.join(timeout)

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                sock, peer = self._listener.accept()
            except socket.timeout:
                continue
            except OSError as e:
                if self._stop.is_set():
                    return
                # Out of file descriptors and the like: keep the listener, try again shortly.
                log.warning("accept failed: %s", e)
                self._stop.wait(0.1)
                continue
            if not self._slots.acquire(blocking=False):
                log.warning("refusing a connection from %s: all workers busy", peer)
                sock.close()
                continue
            sock.settimeout(self._idle_timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            thread = threading.Thread(target=self._serve, args=(sock, peer), name=f"thrift-{peer[1]}", daemon=True)
            with self._lock:
                self._conns[thread] = sock
            thread.start()

    def _serve(self, sock: socket.socket, peer) -> None:
        tsock = TSocket.TSocket()
        tsock.setHandle(sock)
        trans = TTransport.TFramedTransport(tsock, self._max_frame)
        proto = self._proto.getProtocol(trans)
        try:
            while not self._stop.is_set():
                self._processor.process(proto, proto)
        except TTransport.TTransportException as e:
            if e.type not in (TTransport.TTransportException.END_OF_FILE,):
                log.info("closing connection from %s: %s", peer, e)
        except (TException, OSError, ValueError, EOFError, OverflowError) as e:
            log.info("closing connection from %s: %s", peer, e)
        except Exception:  # noqa: BLE001 - one client's request must not take the node down
            log.exception("closing connection from %s", peer)
        finally:
            try:
                sock.close()
            finally:
                with self._lock:
                    self._conns.pop(threading.current_thread(), None)
                self._slots.release()
