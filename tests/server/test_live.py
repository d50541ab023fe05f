"""Incremental text over the WebSocket (``/v1/audio/speech/live``), driven by the ``websockets`` client against a
real server process: text in pieces, audio as stretches complete, word times, flush, errors, a client leaving."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from audio_check import decode
from server_support import Server
from test_faults import chunks_made, health, wait_until
from test_no_stall import FREE_WITHIN_S, _log_has
from tone_model import ToneModel

websockets = pytest.importorskip("websockets")
from websockets.sync.client import ClientConnection, connect  # noqa: E402

LIVE = "/v1/audio/speech/live"
RECV_TIMEOUT_S = 60.0  # only catches a hang: every wait below is for an event


def open_live(server: Server, **kwargs: Any) -> ClientConnection:
    url = server.url.replace("http://", "ws://") + LIVE
    return connect(url, additional_headers=server.headers, open_timeout=RECV_TIMEOUT_S, **kwargs)


def receive_all(ws: ClientConnection) -> tuple[list[dict[str, Any]], bytes]:
    """The JSON messages and the audio bytes until ``done`` or ``error`` (the socket then closes)."""
    messages: list[dict[str, Any]] = []
    audio = b""
    while True:
        frame = ws.recv(timeout=RECV_TIMEOUT_S)
        if isinstance(frame, bytes):
            audio += frame
            continue
        messages.append(json.loads(frame))
        if messages[-1]["type"] in ("done", "error"):
            return messages, audio


def receive_turn(ws: ClientConnection) -> tuple[bytes, dict[str, Any]]:
    """The audio bytes up to the next JSON message, and that message."""
    audio = b""
    while isinstance(frame := ws.recv(timeout=RECV_TIMEOUT_S), bytes):
        audio += frame
    return audio, json.loads(frame)


def tone_audio(stretches: list[str], voice: str = "low") -> np.ndarray:
    """What the tone model says for each stretch, one after another (each stretch is one utterance)."""
    model = ToneModel()
    return np.concatenate([model.expected(s, voice) for s in stretches])


def test_text_in_five_pieces_is_spoken_in_stretches(tone_server: Server) -> None:
    pieces = ["one two", " three, four", " five. six", " seven eight", " nine."]
    with open_live(tone_server) as ws:
        ws.send(json.dumps({"type": "start", "model": "tone", "voice": "high"}))
        ready = json.loads(ws.recv(timeout=RECV_TIMEOUT_S))
        assert ready == {"type": "ready", "model": "tone", "voice": "high", "sample_rate": 24000, "format": "pcm"}
        for piece in pieces:
            ws.send(json.dumps({"type": "text", "text": piece}))
        ws.send(json.dumps({"type": "end"}))
        messages, audio = receive_all(ws)
    # the first stretch at a clause, then sentences: each its own utterance of the tone model
    expected = tone_audio(["one two three,", "four five.", "six seven eight nine."], "high")
    samples, _ = decode(audio, "pcm", 24000)
    np.testing.assert_allclose(samples, expected, atol=2 / 32768)
    assert messages == [{"type": "done", "audio_seconds": round(len(expected) / 24000, 3)}]


def test_a_stretch_with_nothing_to_say_is_passed_over(tone_server: Server) -> None:
    """A Markdown rule or a lone bullet in an agent's reply: passed over, the session goes on (before, one such
    stretch ended it with an error)."""
    pieces = ["Here is the plan:\n", "---\n", "first we go. ", "* \n", "Then we rest."]
    with open_live(tone_server) as ws:
        ws.send(json.dumps({"type": "start", "model": "tone"}))
        assert json.loads(ws.recv(timeout=RECV_TIMEOUT_S))["type"] == "ready"
        for piece in pieces:
            ws.send(json.dumps({"type": "text", "text": piece}))
        ws.send(json.dumps({"type": "end"}))
        messages, audio = receive_all(ws)
    expected = tone_audio(["Here is the plan:", "first we go.", "Then we rest."])
    samples, _ = decode(audio, "pcm", 24000)
    np.testing.assert_allclose(samples, expected, atol=2 / 32768)
    assert messages == [{"type": "done", "audio_seconds": round(len(expected) / 24000, 3)}]


def test_the_first_clause_is_heard_before_the_text_ends(tone_server: Server, tone_log: Path) -> None:
    """Audio of the first clause comes back while the client has not sent the rest: the server did not wait for
    the end (an order of events, not a time)."""
    with open_live(tone_server) as ws:
        ws.send(json.dumps({"type": "start", "model": "slow", "voice": "low"}))
        json.loads(ws.recv(timeout=RECV_TIMEOUT_S))
        ws.send(json.dumps({"type": "text", "text": "robin bird sings, and"}))
        first = ws.recv(timeout=RECV_TIMEOUT_S)  # nothing else was sent: this can only be the first clause
        assert isinstance(first, bytes) and first
        ws.send(json.dumps({"type": "text", "text": " then it rests."}))
        ws.send(json.dumps({"type": "end"}))
        messages, rest = receive_all(ws)
    assert messages[-1]["type"] == "done"
    samples, _ = decode(first + rest, "pcm", 24000)
    np.testing.assert_allclose(samples, tone_audio(["robin bird sings,", "and then it rests."]), atol=2 / 32768)
    assert chunks_made(tone_log, "robin") == 3


def test_flush_speaks_what_is_pending_and_keeps_the_socket(tone_server: Server) -> None:
    with open_live(tone_server) as ws:  # no start message: the default model and voice, pcm
        ws.send(json.dumps({"type": "text", "text": "first turn"}))
        ws.send(json.dumps({"type": "flush"}))
        assert json.loads(ws.recv(timeout=RECV_TIMEOUT_S))["type"] == "ready"
        turn, message = receive_turn(ws)
        assert message == {"type": "flushed"}
        ws.send(json.dumps({"type": "text", "text": "second turn here"}))
        ws.send(json.dumps({"type": "end"}))
        messages, rest = receive_all(ws)
    assert messages[-1]["type"] == "done"
    samples, _ = decode(turn + rest, "pcm", 24000)
    np.testing.assert_allclose(samples, tone_audio(["first turn", "second turn here"]), atol=2 / 32768)


@pytest.mark.parametrize(
    ("messages", "code", "param"),
    [
        (["not json"], "invalid_message", None),
        (["[" * 10_000], "invalid_message", None),
        (['{"type": "text", "text": 1' + "0" * 5000 + "}"], "invalid_message", None),
        ([{"type": "start", "voice": "nobody"}], "voice_not_found", "voice"),
        ([{"type": "start", "model": "nope"}], "model_not_found", "model"),
        ([{"type": "start", "speed": "fast"}], "invalid_value", "speed"),
        ([{"type": "start", "input": "hi"}], "invalid_message", "input"),
        ([{"type": "text", "text": 5}], "invalid_message", "text"),
        ([{"type": "shout"}], "invalid_message", "type"),
        ([{"type": "text", "text": "one"}, {"type": "start"}], "invalid_message", "type"),
        ([{"type": "text", "text": "x" * 2001}], "input_too_long", "text"),
        ([{"type": "start", "response_format": "flac"}], "unsupported_value", "response_format"),
        ([{"type": "start", "stream": False}], "invalid_message", "stream"),
        ([{"type": "start", "stream_format": "sse"}], "invalid_message", "stream_format"),
    ],
)
def test_bad_messages_get_one_error_and_a_close(
    tone_server: Server, messages: list[Any], code: str, param: str | None
) -> None:
    with open_live(tone_server) as ws:
        for message in messages:
            ws.send(message if isinstance(message, str) else json.dumps(message))
        replies = []
        with pytest.raises(websockets.exceptions.ConnectionClosedError) as closed:
            while True:
                frame = ws.recv(timeout=RECV_TIMEOUT_S)
                if isinstance(frame, str):
                    replies.append(json.loads(frame))
    error = replies[-1]
    assert error["type"] == "error" and error["error"]["code"] == code and error["error"]["param"] == param
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


def test_a_failure_while_speaking_closes_with_1011(tone_server: Server) -> None:
    with open_live(tone_server) as ws:
        ws.send(json.dumps({"type": "text", "text": "one FAIL two."}))
        ws.send(json.dumps({"type": "end"}))
        with pytest.raises(websockets.exceptions.ConnectionClosedError) as closed:
            messages, _ = receive_all(ws)
            ws.recv(timeout=RECV_TIMEOUT_S)
    assert messages[-1]["error"]["code"] == "synthesis_failed"
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011


def test_the_key_is_checked(tone_server: Server) -> None:
    url = tone_server.url.replace("http://", "ws://") + LIVE
    with pytest.raises(websockets.exceptions.InvalidStatus) as keyless:
        connect(url, open_timeout=RECV_TIMEOUT_S)
    assert keyless.value.response.status_code == 401
    assert b"invalid_api_key" in keyless.value.response.body


def test_a_page_of_another_site_cannot_open_it(kokoro_server: Server) -> None:
    """``ggtts serve`` on loopback: a browser page of another origin is refused (a WebSocket is not bound by the
    same-origin rules); the server's own page, and clients that send no Origin, are not."""
    port = kokoro_server.url.rpartition(":")[2]
    for origin in ("http://evil.example", "null", "http://localhost:6666", f"http://evil.example:{port}"):
        with pytest.raises(websockets.exceptions.InvalidStatus) as foreign:
            open_live(kokoro_server, origin=origin)
        assert foreign.value.response.status_code == 403, origin
    for origin in (kokoro_server.url, None):
        with open_live(kokoro_server, origin=origin) as ws:
            ws.send(json.dumps({"type": "start"}))
            assert json.loads(ws.recv(timeout=RECV_TIMEOUT_S))["type"] == "ready"


@pytest.mark.parametrize("ended", [False, True], ids=["mid-text", "after-end"])
def test_a_client_leaving_cancels_the_stretch_being_spoken(tone_server: Server, tone_log: Path, ended: bool) -> None:
    """Also after ``end``, when the client has nothing more to send: the server reads on, so it notices."""
    tag = f"gone{int(ended)}"
    with open_live(tone_server) as ws:
        ws.send(json.dumps({"type": "start", "model": "slow"}))
        ws.send(json.dumps({"type": "text", "text": f"{tag} HEAVY now. "}))
        if ended:
            ws.send(json.dumps({"type": "end"}))
        wait_until(lambda: _log_has(tone_log, f"{tag} heavy-start"))
    wait_until(lambda: not health(tone_server)["slow"]["busy"], timeout_s=FREE_WITHIN_S)
    assert not _log_has(tone_log, f"{tag} heavy-end"), "the chunk in progress ran to its end"


def test_flush_ends_a_compressed_stream_so_the_turn_is_heard_whole(tone_server: Server) -> None:
    """mp3 keeps audio back until its stream ends: at a flush the turn's stream ends (its tail sent before
    ``flushed``), and the next turn is a stream of its own."""
    turns: list[bytes] = []
    with open_live(tone_server) as ws:
        ws.send(json.dumps({"type": "start", "model": "tone", "response_format": "mp3"}))
        json.loads(ws.recv(timeout=RECV_TIMEOUT_S))
        for text in ("one two three", "four five six"):
            ws.send(json.dumps({"type": "text", "text": text}))
            ws.send(json.dumps({"type": "flush"}))
            turn, message = receive_turn(ws)
            assert message == {"type": "flushed"}
            turns.append(turn)
        ws.send(json.dumps({"type": "end"}))
        receive_all(ws)
    for turn, text in zip(turns, ("one two three", "four five six"), strict=True):
        samples, _ = decode(turn, "mp3", 24000)  # each turn a whole mp3 stream, as long as its speech
        assert len(samples) >= len(ToneModel().expected(text))


def test_kokoro_words_come_with_session_times(kokoro_server: Server) -> None:
    """A real (tiny, random) Kokoro: each stretch's words, their times counted from the session's first sample."""
    pieces = ["Hello there my", " friend, how are", " you today? I am", " fine, thank", " you."]
    with open_live(kokoro_server) as ws:
        ws.send(json.dumps({"type": "start", "voice": "v_two"}))
        json.loads(ws.recv(timeout=RECV_TIMEOUT_S))
        for piece in pieces:
            ws.send(json.dumps({"type": "text", "text": piece}))
        ws.send(json.dumps({"type": "end"}))
        messages, audio = receive_all(ws)
    words = [w for m in messages if m["type"] == "words" for w in m["words"]]
    said = "".join(pieces).replace(",", "").replace("?", "").replace(".", "").split()
    assert [w["word"] for w in words] == said
    starts = [w["start"] for w in words]
    assert starts == sorted(starts) and all(w["end"] >= w["start"] for w in words)
    seconds = len(audio) / 2 / 24000
    assert messages[-1] == {"type": "done", "audio_seconds": round(seconds, 3)}
    assert words[-1]["end"] <= seconds + 1e-3
    assert words[-3]["start"] > seconds / 2  # the last stretch's words are late in the session, not at its start


def test_kokoros_first_clause_is_spoken_before_the_rest_comes(kokoro_server: Server) -> None:
    """Kokoro's stream speaks a text's first clause alone however short, so the socket cuts the first stretch there
    too: "Sure," is spoken (its word, then its audio) while the rest of the sentence has not been sent."""
    with open_live(kokoro_server) as ws:
        ws.send(json.dumps({"type": "start", "voice": "v_two"}))
        json.loads(ws.recv(timeout=RECV_TIMEOUT_S))
        for piece in ["Sure,", " the"]:
            ws.send(json.dumps({"type": "text", "text": piece}))
        words = json.loads(ws.recv(timeout=RECV_TIMEOUT_S))
        audio = ws.recv(timeout=RECV_TIMEOUT_S)
        ws.send(json.dumps({"type": "text", "text": " forecast looks good."}))
        ws.send(json.dumps({"type": "end"}))
        messages, _ = receive_all(ws)
    assert words["type"] == "words" and [w["word"] for w in words["words"]] == ["Sure"]
    assert isinstance(audio, bytes) and len(audio) > 2000
    later = [w["word"] for m in messages if m["type"] == "words" for w in m["words"]]
    assert later == ["the", "forecast", "looks", "good"]


def test_a_word_said_across_two_chunks_is_sent_once_whole(kokoro_server: Server) -> None:
    """The tiny Kokoro reads 62 phonemes at a time: the number is said across chunks. Its words message comes once,
    from its start to the end of its last piece: the times the whole utterance has (captioned_speech, unstreamed)."""
    import httpx

    text = "I paid $1,234,567.89 today."
    with open_live(kokoro_server) as ws:
        ws.send(json.dumps({"type": "start", "voice": "v_two"}))
        json.loads(ws.recv(timeout=RECV_TIMEOUT_S))
        ws.send(json.dumps({"type": "text", "text": text}))
        ws.send(json.dumps({"type": "end"}))
        messages, _ = receive_all(ws)
    words = [w for m in messages if m["type"] == "words" for w in m["words"]]
    body = {"input": text, "voice": "v_two", "stream": False}
    whole = httpx.post(kokoro_server.url + "/v1/audio/captioned_speech", json=body, timeout=RECV_TIMEOUT_S).json()
    expected = [{"word": t["word"], "start": t["start_time"], "end": t["end_time"]} for t in whole["timestamps"]]
    assert [w["word"] for w in expected] == ["I", "paid", "$1,234,567.89", "today"]
    assert words == expected


def test_a_message_larger_than_any_valid_one_is_refused_as_it_arrives(tone_server: Server) -> None:
    with open_live(tone_server) as ws:
        ws.send(json.dumps({"type": "text", "text": "x" * 100_000}))  # over the server's body limit
        with pytest.raises(websockets.exceptions.ConnectionClosedError) as closed:
            ws.recv(timeout=RECV_TIMEOUT_S)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009  # message too big
