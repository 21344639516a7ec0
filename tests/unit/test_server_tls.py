"""The Thrift front over TLS (delayq.nodes.front.server with an ssl context): the same answers,
limits and timeouts as in plaintext, with real certificates on 127.0.0.1 sockets."""
from __future__ import annotations

import concurrent.futures
import socket
import ssl

import pytest
from thrift.transport import TTransport

from delayq.access.tls import server_context
from delayq.client.security import ClientSecurity
from delayq.nodes.front.caller import current
from delayq.nodes.front.handshakes import HandshakeBudget, TlsPort
from delayq.ops.certs import dev_set
from delayq.testing import security
from tests.conftest import wait_until
from tests.unit.test_server import Front, Handler, _spec


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    folder = security.ensure()
    dev_set(folder, clients=("cert-client",))
    return folder


class TlsFront(Front):
    def __init__(self, handler, certs, budget: HandshakeBudget | None = None, **limits):
        self.refused: list[str] = []
        super().__init__(handler, tls=TlsPort(server_context(str(certs / "node.pem"), str(certs / "node.key"),
                                                             str(certs / "ca.pem"), "optional"),
                                              budget, self.refused.append), **limits)
        self.security = ClientSecurity(ca_file=str(certs / "ca.pem"))


def test_calls_over_tls_get_their_answers(certs):
    with TlsFront(Handler(), certs) as front:
        client, transport = front.client()
        try:
            assert client.submitBatch([_spec(i) for i in range(3)])[2].taskId == "id-2"
            assert client.get("5").taskId == "5"
        finally:
            transport.close()


def test_a_reply_larger_than_a_tls_record_and_the_socket_buffer_arrives_whole(certs):
    with TlsFront(Handler(), certs, max_frame=8 << 20) as front:
        client, transport = front.client()
        try:
            assert len(client.get(str(3 << 20)).payload) == 3 << 20
        finally:
            transport.close()


def test_many_tls_clients_at_once_each_get_their_own_answers(certs):
    with TlsFront(Handler(), certs) as front:
        def one(i):
            client, transport = front.client()
            try:
                return [r.taskId for r in client.submitBatch([_spec(i * 10 + k) for k in range(5)])]
            finally:
                transport.close()
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            results = list(pool.map(one, range(8)))
    assert results == [[f"id-{i * 10 + k}" for k in range(5)] for i in range(8)]


def test_a_stalled_handshake_is_closed_after_the_first_frame_timeout_and_blocks_no_one(certs):
    with TlsFront(Handler(), certs, first_frame_timeout=0.5) as front:
        stalled = front.raw()
        stalled.sendall(b"\x16\x03\x01\x00\xff")        # the head of a ClientHello
        client, transport = front.client()
        try:
            assert client.get("1").taskId == "1"
        finally:
            transport.close()
        stalled.settimeout(5)
        assert stalled.recv(1) == b""
        wait_until(lambda: "tls_handshake_timeout" in front.closed, 5, what="the stall to be counted")


def test_plaintext_to_a_tls_port_is_closed_as_a_failed_handshake(certs):
    with TlsFront(Handler(), certs) as front:
        front.security = ClientSecurity(insecure=True)
        with pytest.raises(TTransport.TTransportException):
            client, transport = front.client()
            client.get("1")
        wait_until(lambda: "tls_handshake" in front.closed, 5, what="the failed handshake to be counted")


def test_tls_to_a_plaintext_port_fails_at_the_client_and_the_server_serves_on(certs):
    with Front(Handler()) as front:
        tls = ClientSecurity(ca_file=str(certs / "ca.pem")).context()
        with socket.create_connection(("127.0.0.1", front.server.port), timeout=5) as raw:
            with pytest.raises((ssl.SSLError, OSError)):
                tls.wrap_socket(raw, server_hostname="127.0.0.1")
        client, transport = front.client()
        try:
            assert client.get("1").taskId == "1"
        finally:
            transport.close()
    assert "frame_too_large" in front.closed or "unreadable" in front.closed


def test_a_client_certificate_is_noted_on_the_connection(certs):
    seen = []

    class Seeing(Handler):
        def get(self, taskId):
            seen.append(current().certificate)
            return super().get(taskId)

    with TlsFront(Seeing(), certs) as front:
        front.security = ClientSecurity(ca_file=str(certs / "ca.pem"), cert_file=str(certs / "cert-client.pem"),
                                        key_file=str(certs / "cert-client.key"))
        client, transport = front.client()
        try:
            client.get("1")
        finally:
            transport.close()
    assert seen == ["cert-client"]


def test_an_address_past_its_handshake_budget_is_closed_before_its_handshake_and_counted(certs):
    # A budget of 3 with next to no refill: the 4th connection from 127.0.0.1 within the test.
    with TlsFront(Handler(), certs, budget=HandshakeBudget(3, 0.001)) as front:
        transports = []
        try:
            for i in range(3):
                client, transport = front.client()
                transports.append(transport)
                assert client.get(str(i)).taskId == str(i)
            tls = front.security.context()
            with socket.create_connection(("127.0.0.1", front.server.port), timeout=5) as raw:
                with pytest.raises((ssl.SSLError, OSError)):      # closed with no ServerHello
                    tls.wrap_socket(raw, server_hostname="127.0.0.1")
            wait_until(lambda: front.refused == ["127.0.0.1"], 5, what="the refusal to be reported")
            assert front.closed == ["handshake_budget"]
        finally:
            for t in transports:
                t.close()
