"""Fuzzing the parsers of the doors opened for speech (issue #36): the live text WebSocket's messages, the Wyoming
server's events, batch manifests' JSONL lines, and the audio chat's request bodies. Whatever arrives, each answers
with its own kind of refusal (an ``error`` message and a policy close, an ``error`` event, one ``FILE:LINE`` input
error, a 4xx) or does what was asked; nothing escapes as a crash, and the door goes on serving."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from starlette.websockets import WebSocketDisconnect
from tone_model import ToneModel

from ggtts.batch.items import InputFileError, read_items
from ggtts.server.app import create_app
from ggtts.server.settings import ServerSettings
from time_limit import time_limit

LIVE = "/v1/audio/speech/live"
EXAMPLES = 60
HANG_S = 60  # a watchdog: a session here takes milliseconds
# the same examples on every run (CI is reproducible); fixtures shared by a test's examples are fine here
FUZZ = settings(
    deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
# words the tone model obeys (FAIL, HEAVY, BADINPUT) stay out: lower-case letters, digits, marks, other scripts
SAFE_TEXT = st.text(alphabet=st.sampled_from("abc xyz 0123456789 .,;:!?'\"-\n\t日本語ü\u0301😀"), max_size=40)
ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False),
    SAFE_TEXT,
    st.just("\ud800"),  # a lone surrogate: valid JSON, not text
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.sampled_from(["id", "x"]), st.integers(), max_size=2),
)
MESSAGE_TYPES = st.sampled_from(["start", "text", "flush", "end", "bogus", "", "TEXT"])
LIVE_FIELDS = ["model", "voice", "speed", "response_format", "stream_format", "lang_code", "input", "seed"]


def _message() -> st.SearchStrategy[Any]:
    fields = st.dictionaries(st.sampled_from(LIVE_FIELDS), ODD_VALUES, max_size=3)
    typed = st.builds(lambda kind, text, rest: {"type": kind, **rest, **text}, MESSAGE_TYPES, st.one_of(
        st.just({}), st.builds(lambda t: {"text": t}, st.one_of(SAFE_TEXT, ODD_VALUES))
    ), fields)  # fmt: skip
    raw = st.one_of(SAFE_TEXT, st.just("{"), st.just("[1, 2]"), st.just("null"), st.just('{"type": 5}'))
    return st.one_of(typed, typed, st.builds(lambda r: ("raw", r), raw), st.builds(lambda b: ("bytes", b), st.binary()))


@pytest.fixture(scope="module")
def live_client() -> Iterator[TestClient]:
    app = create_app({"tone": ToneModel()}, ServerSettings(max_input_chars=200, timeout_s=30))
    with TestClient(app) as client:
        yield client


def _send(ws: Any, message: Any) -> None:
    if isinstance(message, tuple) and message[0] == "raw":
        ws.send_text(message[1])
    elif isinstance(message, tuple):
        ws.send_bytes(message[1])
    else:
        ws.send_text(json.dumps(message))


@settings(FUZZ, max_examples=EXAMPLES * 3)
@given(messages=st.lists(_message(), min_size=1, max_size=4), end=st.booleans())
# every message type in a well-formed session, each run (the random ones mostly meet a refusal early)
@example(messages=[{"type": "start", "voice": "high"}, {"type": "text", "text": "one two. "}], end=True)
@example(messages=[{"type": "text", "text": "a b"}, {"type": "flush"}, {"type": "text", "text": "c"}], end=True)
@example(messages=[{"type": "flush"}], end=False)
def test_live_messages(live_client: TestClient, messages: list[Any], end: bool) -> None:
    errors, closed, last_error = 0, None, None
    end = end or any(isinstance(m, dict) and m.get("type") == "end" for m in messages)
    with time_limit(HANG_S, "a live session"), live_client.websocket_connect(LIVE) as ws:
        try:
            for message in [*messages, *([{"type": "end"}] if end else [])]:
                _send(ws, message)
            while True:
                frame = ws.receive()
                if frame["type"] == "websocket.close":
                    closed = frame["code"]
                    break
                if frame.get("text") is not None:
                    event = json.loads(frame["text"])
                    assert event["type"] in {"ready", "words", "flushed", "done", "error"}, event
                    if event["type"] == "error":
                        errors, last_error = errors + 1, event["error"]
                        assert event["error"]["message"] and event["error"]["code"], event
                if not end and errors == 0 and frame.get("text") and json.loads(frame["text"])["type"] == "ready":
                    _send(ws, {"type": "end"})  # a well-formed session so far: end it, to read to the close
                    end = True
        except WebSocketDisconnect as gone:
            closed = gone.code
    if errors:  # a refusal of what was sent (the tone model never fails on this text, nor is its queue full)
        assert errors == 1 and closed in (1008, 1009), (errors, closed, last_error)
    else:
        assert closed == 1000, closed


# ---- Wyoming ------------------------------------------------------------------------------------------------
WYOMING_TYPES = st.sampled_from(
    ["describe", "synthesize", "synthesize-start", "synthesize-chunk", "synthesize-stop", "select-program",
     "audio-chunk", "ping", "nonsense", ""]
)  # fmt: skip
WYOMING_DATA = st.one_of(
    st.none(),
    st.dictionaries(
        st.sampled_from(["text", "voice", "name", "speaker", "language", "rate"]),
        st.one_of(ODD_VALUES, st.dictionaries(st.sampled_from(["name", "speaker", "language"]), ODD_VALUES)),
        max_size=3,
    ),
    ODD_VALUES,
)
ANSWERS = {"info", "error", "audio-start", "audio-chunk", "audio-stop", "synthesize-stopped"}


@pytest.fixture(scope="module")
def wyoming_port() -> Iterator[int]:
    from test_wyoming import _serve_in_thread

    settings_ = ServerSettings(max_input_chars=200, timeout_s=30)
    yield from (port for port, _ in _serve_in_thread({"tone": ToneModel()}, settings_))


def _event_bytes(kind: str, data: Any) -> bytes:
    header: dict[str, Any] = {"type": kind}
    if data is not None:
        payload = json.dumps(data).encode()
        header["data_length"] = len(payload)
        return json.dumps(header).encode() + b"\n" + payload
    return json.dumps(header).encode() + b"\n"


def _answers(sock: socket.socket) -> list[str] | None:
    """The types of the events the server sent until it went quiet after a describe's info (None: it closed)."""
    buffer = b""
    types: list[str] = []
    sock.settimeout(30)
    while True:
        line_end = buffer.find(b"\n")
        while line_end < 0:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            buffer += chunk
            line_end = buffer.find(b"\n")
        header = json.loads(buffer[:line_end])
        buffer = buffer[line_end + 1 :]
        extra = header.get("data_length", 0) + header.get("payload_length", 0)
        while len(buffer) < extra:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            buffer += chunk
        buffer = buffer[extra:]
        types.append(header["type"])
        if header["type"] == "info":
            return types


@settings(FUZZ, max_examples=EXAMPLES)
@given(events=st.lists(st.tuples(WYOMING_TYPES, WYOMING_DATA), min_size=1, max_size=4))
def test_wyoming_events(wyoming_port: int, caplog: pytest.LogCaptureFixture, events: list[tuple[str, Any]]) -> None:
    caplog.clear()
    with socket.create_connection(("127.0.0.1", wyoming_port)) as sock:
        sock.sendall(b"".join(_event_bytes(k, d) for k, d in events) + _event_bytes("describe", None))
        types = _answers(sock)
    if all(d is None or isinstance(d, dict) for _, d in events):  # events as the protocol frames them
        assert types is not None, "the connection was dropped"  # each gets its answer (or none), then the info
        assert set(types) <= ANSWERS, types
    # data that is not a JSON object ends its connection (as the wyoming reader ends one for data not JSON at
    # all), quietly: no task dies with a traceback
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    # and the server serves the next connection whatever this one did
    with socket.create_connection(("127.0.0.1", wyoming_port)) as sock:
        sock.sendall(_event_bytes("describe", None))
        assert _answers(sock) == ["info"]


def test_wyoming_garbage_lines_close_only_their_connection(wyoming_port: int) -> None:
    for garbage in (
        b"not json\n",
        b"[1, 2]\n",
        b'{"no": "type"}\n',
        b"\xff\xfe\n",
        b'{"type": "describe", "data_length": -5}\n',
    ):
        with socket.create_connection(("127.0.0.1", wyoming_port)) as sock:
            sock.sendall(garbage + _event_bytes("describe", None))
            _answers(sock)  # closed, or answered: either way no crash
        with socket.create_connection(("127.0.0.1", wyoming_port)) as sock:
            sock.sendall(_event_bytes("describe", None))
            assert _answers(sock) == ["info"]


# ---- batch manifests ------------------------------------------------------------------------------------------
JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), SAFE_TEXT, st.just("\ud800")),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(SAFE_TEXT, inner, max_size=3)),
    max_leaves=8,
)
ITEM_FIELDS = ["id", "text", "voice", "speed", "model", "title", "extra"]
ITEM = st.dictionaries(st.sampled_from(ITEM_FIELDS), JSON_VALUES, max_size=5)
LINE = st.one_of(
    st.builds(json.dumps, ITEM), st.builds(json.dumps, JSON_VALUES), SAFE_TEXT, st.just("[" * 50_000), st.just("")
)


@settings(FUZZ, max_examples=EXAMPLES * 2)
@given(lines=st.lists(LINE, min_size=1, max_size=4))
@example(lines=['{"text": ""}'])  # an item, failed on its own when spoken (test_batch_cli), not a file error
def test_jsonl_manifest_lines(tmp_path_factory: pytest.TempPathFactory, lines: list[str]) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "items.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    try:
        items = read_items(path)
    except InputFileError as error:
        message = str(error)
        assert message.startswith(str(path)) and "\n" not in message, message
        return
    assert items and all(isinstance(i.text, str) for i in items)


# ---- the audio chat's request bodies ----------------------------------------------------------------------------
B64 = st.one_of(st.just("UklGRg=="), st.just("@@@"), st.just(""), st.binary(max_size=12).map(
    lambda b: __import__("base64").b64encode(b).decode()), ODD_VALUES)  # fmt: skip
PART = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.one_of(SAFE_TEXT, ODD_VALUES)}),
    st.fixed_dictionaries({"type": st.just("input_audio"), "input_audio": st.one_of(
        st.fixed_dictionaries({"data": B64}, optional={"format": ODD_VALUES}), ODD_VALUES)}),
    st.dictionaries(st.sampled_from(["type", "text", "image_url", "x"]), ODD_VALUES, max_size=3),
)  # fmt: skip
MESSAGE = st.fixed_dictionaries(
    {"role": st.one_of(st.just("user"), st.sampled_from(["system", "developer", "assistant", "tool"]), ODD_VALUES)},
    optional={"content": st.one_of(SAFE_TEXT, st.lists(PART, max_size=3), ODD_VALUES), "name": ODD_VALUES},
)
CHAT_BODY = st.fixed_dictionaries(
    {"messages": st.one_of(st.lists(MESSAGE, max_size=4), ODD_VALUES)},
    optional={
        "model": ODD_VALUES,
        "modalities": st.one_of(st.lists(st.sampled_from(["text", "audio", "video"]), max_size=3), ODD_VALUES),
        "audio": st.one_of(st.fixed_dictionaries({}, optional={"voice": ODD_VALUES, "format": st.one_of(
            st.sampled_from(["wav", "pcm16", "flac", "mp4"]), ODD_VALUES)}), ODD_VALUES),
        "stream": ODD_VALUES, "max_completion_tokens": ODD_VALUES, "seed": ODD_VALUES, "n": ODD_VALUES,
        "options": ODD_VALUES, "temperature": ODD_VALUES,
    },
)  # fmt: skip


@pytest.fixture(scope="module")
def chat_client() -> Iterator[TestClient]:
    with TestClient(create_app({"tone": ToneModel()}, ServerSettings())) as client:
        yield client


def _audio_part(data: str) -> dict[str, Any]:
    return {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}


@settings(FUZZ, max_examples=EXAMPLES * 3, suppress_health_check=())
@given(body=CHAT_BODY)
@example(body={"messages": [{"role": "user", "content": [_audio_part("@@@")]}]})
@example(body={"messages": [{"role": "user", "content": [_audio_part("")]}]})
@example(body={"messages": [{"role": "user", "content": [_audio_part("UklGRg=="), _audio_part("UklGRg==")]}]})
@example(body={"messages": [{"role": "assistant", "content": [_audio_part("UklGRg==")]}]})
@example(body={"messages": [{"role": "user", "content": "hi"}], "modalities": ["audio"], "stream": True,
               "audio": {"format": "flac"}})  # fmt: skip
def test_chat_bodies_are_parsed_or_refused_with_a_4xx(chat_client: TestClient, body: dict[str, Any]) -> None:
    """The parser itself (what a model that answers would be asked), then the route of a server whose model only
    speaks: a question and a format, or one ApiError of 400; a 4xx from the server, JSON, never a 5xx."""
    from pydantic import ValidationError

    from ggtts.server.chat import ChatRequest, output_format, question
    from ggtts.server.errors import ApiError

    try:
        request = ChatRequest.model_validate(body)
    except ValidationError:
        pass
    else:
        try:
            asked = question(request)
            output_format(request)
        except ApiError as error:
            assert error.status == 400 and error.message
        else:
            assert asked.audio or asked.text.strip()
    data = json.dumps(body)  # ASCII: a lone surrogate goes as the escape \ud800, as a client's JSON may hold it
    response = chat_client.post("/v1/chat/completions", content=data, headers={"Content-Type": "application/json"})
    assert 400 <= response.status_code < 500, response.text
    assert response.json()["error"]["message"]
