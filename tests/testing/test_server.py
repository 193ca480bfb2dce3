"""The HTTP layer: bad input, unknown paths, internal errors, keep-alive, the record, lifecycle."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
from typing import Any

import anthropic
import pytest

from otel_context.testing import ManualClock, SimulatedProvider
from otel_context.testing import server as server_module
from tests.values import body_of

from .helpers import CLAUDE, GPT


def _raw(sim: Any, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
    conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=5)
    try:
        conn.request("POST", path, body, {"content-type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, json.loads(data)
    finally:
        conn.close()


def test_malformed_json_anthropic(sim: Any) -> None:
    status, headers, body = _raw(sim, "/v1/messages", b"{not json")
    assert status == 400
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert headers["request-id"] == body["request_id"]
    assert sim.last_exchange.status == 400 and sim.last_exchange.body is None


def test_malformed_json_openai(sim: Any) -> None:
    status, headers, body = _raw(sim, "/v1/chat/completions", b"[1, 2")
    assert status == 400
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith("We could not parse the JSON body of your request.")
    assert headers["x-request-id"].startswith("req_")


def test_non_object_body(sim: Any) -> None:
    status, _, body = _raw(sim, "/v1/messages", b"[]")
    assert status == 400 and body["error"]["type"] == "invalid_request_error"
    status, _, body = _raw(sim, "/v1/responses", b'"text"')
    assert status == 400 and body["error"]["code"] == "invalid_type"


def test_unknown_paths(sim: Any) -> None:
    status, _, body = _raw(sim, "/v1/completions", b"{}")
    assert status == 404
    assert body == {
        "error": {
            "message": "Invalid URL (POST /v1/completions)",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }
    status, _, body = _raw(sim, "/v1/files", b"{}", {"anthropic-version": "2023-06-01"})
    assert status == 404 and body["error"]["type"] == "not_found_error"


def test_query_string_is_ignored(sim: Any) -> None:
    payload = json.dumps({"model": CLAUDE, "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}).encode()
    status, _, body = _raw(sim, "/v1/messages?beta=true", payload)
    assert status == 200 and body["type"] == "message"


def test_a_request_through_a_proxy_is_answered_as_its_path(sim: Any) -> None:
    """A client whose proxy is the simulator sends the absolute form; it is answered like the origin form."""
    http = anthropic.DefaultHttpxClient(proxy=f"http://user:secret@127.0.0.1:{sim.port}", trust_env=False)
    client = anthropic.Anthropic(base_url="http://provider.invalid", api_key="k", http_client=http, max_retries=0)
    try:
        reply = client.messages.create(model=CLAUDE, max_tokens=5, messages=[{"role": "user", "content": "x"}])
    finally:
        client.close()
    assert reply.type == "message"
    exchange = sim.last_exchange
    assert exchange.path == "/v1/messages" and exchange.headers["host"] == "provider.invalid"
    assert exchange.headers["proxy-authorization"].startswith("Basic ")


def test_internal_error_is_provider_shaped_and_silent(
    sim: Any, anthropic_client: Any, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    def boom(state: Any, req: Any) -> Any:
        raise RuntimeError("simulator bug")

    monkeypatch.setitem(server_module._ROUTES, "/v1/messages", ("anthropic", boom))
    with pytest.raises(anthropic.InternalServerError) as info:
        anthropic_client.messages.create(model=CLAUDE, max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert body_of(info.value)["error"]["type"] == "api_error"
    assert "RuntimeError: simulator bug" in (sim.last_exchange.error or "")
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err


def test_keep_alive_serves_many_requests_on_one_connection(sim: Any) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=5)
    payload = json.dumps({"model": GPT, "messages": [{"role": "user", "content": "x"}]})
    try:
        conn.connect()
        sock = conn.sock
        for _ in range(3):
            conn.request("POST", "/v1/chat/completions", payload, {"content-type": "application/json"})
            resp = conn.getresponse()
            assert resp.status == 200
            assert resp.getheader("connection") != "close"
            resp.read()
        assert conn.sock is sock  # never reconnected
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) in (0, 1)
    finally:
        conn.close()
    assert len(sim.exchanges) == 3


def test_chunked_request_body(sim: Any) -> None:
    payload = json.dumps({"model": GPT, "messages": [{"role": "user", "content": "x"}]}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=5)
    try:
        conn.request(
            "POST",
            "/v1/chat/completions",
            body=iter([payload[:10], payload[10:]]),
            headers={"content-type": "application/json"},
            encode_chunked=True,
        )
        resp = conn.getresponse()
        assert resp.status == 200
        assert json.loads(resp.read())["object"] == "chat.completion"
    finally:
        conn.close()


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_client_that_hangs_up_while_sending_makes_no_exchange(sim: Any, chunked: bool) -> None:
    """A client that gives up mid-body (its timeout, or the app closing it) sent no request: a real server
    drops such a connection, so none is recorded (it used to be a 400 "expected an object" of an empty body)."""
    payload = json.dumps({"model": GPT, "messages": [{"role": "user", "content": "x" * 1000}]}).encode()
    if chunked:
        head = b"transfer-encoding: chunked\r\n\r\n" + f"{len(payload):x}\r\n".encode() + payload[:100]
    else:
        head = f"content-length: {len(payload)}\r\n\r\n".encode() + payload[:100]
    with socket.create_connection(("127.0.0.1", sim.port), timeout=5) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n" + head)
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(1024) == b""  # no answer: the server closed the connection
    status, _, body = _raw(sim, "/v1/chat/completions", payload)  # and serves the next one as usual
    assert status == 200 and body["object"] == "chat.completion"
    assert [e.status for e in sim.exchanges] == [200]


def test_in_flight_counts_a_request_the_client_gave_up_on_until_it_is_recorded(sim: Any) -> None:
    """A client that times out has gone; its request is still being handled, and recorded once it is."""
    sim.latency = 0.5
    client = sim.openai(timeout=0.05)
    with pytest.raises(Exception, match="timed out"):
        client.chat.completions.create(model=GPT, messages=[{"role": "user", "content": "x"}])
    client.close()
    assert sim.in_flight == 1 and sim.exchanges == []
    sim.wait_idle(5)
    assert sim.in_flight == 0
    assert [e.status for e in sim.exchanges] == [200]


def test_exchanges_record_and_clear(sim: Any, anthropic_client: Any) -> None:
    with pytest.raises(LookupError):
        _ = sim.last_exchange
    anthropic_client.messages.create(model=CLAUDE, max_tokens=5, messages=[{"role": "user", "content": "x"}])
    anthropic_client.messages.create(
        model=CLAUDE, max_tokens=5, messages=[{"role": "user", "content": "y"}], stream=True
    ).close()
    assert [x.stream for x in sim.exchanges] == [False, True]
    assert sim.exchanges[1].response[0][0] == "message_start"
    assert sim.exchanges[1].usage["output_tokens"] >= 1
    snapshot = sim.exchanges
    sim.clear()
    assert sim.exchanges == [] and len(snapshot) == 2


def test_lifecycle_and_injectable_clock() -> None:
    ticks = [100.0]
    sim = SimulatedProvider(clock=lambda: ticks[0])
    with pytest.raises(RuntimeError, match="not running"):
        _ = sim.base_url
    with sim:
        assert sim.running
        assert sim.openai_base_url == sim.base_url + "/v1"
    assert not sim.running
    clock = ManualClock(5)
    assert clock.advance(2) == 7 == clock() == clock.now()
    with pytest.raises(ValueError, match="backwards"):
        clock.advance(-1)


def test_latency_setting_still_answers() -> None:
    with SimulatedProvider(latency=0.01) as sim:
        client = sim.openai()
        try:
            assert client.chat.completions.create(model=GPT, messages=[{"role": "user", "content": "x"}]).choices
        finally:
            client.close()


def test_package_imports_without_the_sdks() -> None:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('anthropic', 'openai'):\n"
        "            raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import otel_context.testing as t, otel_context.testing.pytest_plugin\n"
        "with t.SimulatedProvider() as sim:\n"
        "    print(t.count_tokens('hello world'), sim.port > 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "4 True"


def test_standalone_server_process() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "otel_context.testing", "--window", "gpt-4o=10"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("anthropic base_url: http://127.0.0.1:")
        port = int(line.rsplit(":", 1)[1])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        body = json.dumps({"model": GPT, "messages": [{"role": "user", "content": "word " * 20}]})
        conn.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 400
        assert json.loads(resp.read())["error"]["code"] == "context_length_exceeded"
        conn.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"windows": {"m": 0}}, "windows\\['m'\\] must be a positive int"),
        ({"default_window": 0}, "default_window must be positive"),
        ({"min_cacheable_tokens": -1}, "min_cacheable_tokens"),
        ({"latency": -0.1}, "latency"),
        ({"clock": 5}, "clock must be a callable"),
    ],
)
def test_constructor_rejects_bad_arguments(kwargs: dict[str, Any], error: str) -> None:
    with pytest.raises((ValueError, TypeError), match=error):
        SimulatedProvider(**kwargs)


def test_set_window_rejects_non_positive(sim: Any) -> None:
    with pytest.raises(ValueError, match="positive"):
        sim.set_window(GPT, 0)


def test_restart_after_stop() -> None:
    sim = SimulatedProvider()
    with sim:
        first = sim.port
    with sim:
        assert sim.port > 0
        client = sim.openai()
        try:
            assert client.chat.completions.create(model=GPT, messages=[{"role": "user", "content": "x"}]).choices
        finally:
            client.close()
    assert first > 0


def test_the_prompts_kept_for_cache_diagnostics_can_be_forgotten(sim: Any) -> None:
    """The provider keeps each answered request's prompt to diagnose a later request against it (up to 4,096
    whole prompts); a long run forgets them as it forgets its exchanges (benchmarks/soak.py: they are the
    provider's memory, not the app's), and a request that then names one learns it is not found."""
    import openai

    client = openai.OpenAI(base_url=sim.openai_base_url, api_key="k", max_retries=0)
    prompt = "Read this. " + "word " * 1500
    first = client.responses.create(model=GPT, input=prompt, store=False)

    def compared_to_first() -> Any:
        response = client.responses.create(
            model=GPT,
            input=prompt + "and one more",
            store=False,
            extra_body={"prompt_cache_options": {"comparison_response_id": first.id}},
        )
        return response.model_dump()["prompt_cache_diagnostics"]["type"]

    assert compared_to_first() != "comparison_response_not_found"
    sim.forget_prompt_records()
    assert compared_to_first() == "comparison_response_not_found"
