"""The HTTP API of a real server process on loopback: endpoints, formats, streaming, errors, access."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np
import pytest
from audio_check import decode
from server_support import API_KEY, KOKORO_FASTAPI_NORMALIZATION, TONE_MAX_INPUT_CHARS, Server
from test_faults import chunks_made
from tone_model import ToneModel

FORMATS = ["wav", "mp3", "opus", "aac", "flac", "pcm"]
STREAM_FORMATS = ["wav", "mp3", "opus", "aac", "pcm"]
SPEECH = "/v1/audio/speech"
TEXT = "one two three four"
# lossy codecs add encoder delay and padding; their length is checked loosely
LOSSY_EXTRA_SAMPLES = 4096
REQUEST_TIMEOUT_S = 120


def post(server: Server, body: object, **kwargs: object) -> httpx.Response:
    return httpx.post(server.url + SPEECH, json=body, headers=server.headers, timeout=REQUEST_TIMEOUT_S, **kwargs)


def error_of(response: httpx.Response) -> dict[str, object]:
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]


# ---- endpoints ----
def test_health_needs_no_key(tone_server: Server) -> None:
    response = httpx.get(tone_server.url + "/health")
    assert response.status_code == 200
    assert response.json()["status"] == "ok"
    assert set(response.json()["models"]) == {"tone", "slow", "tone16k"}


def test_models_lists_the_loaded_names(tone_server: Server) -> None:
    response = httpx.get(tone_server.url + "/v1/models", headers=tone_server.headers)
    assert response.status_code == 200
    cards = {c["id"]: c for c in response.json()["data"]}
    assert list(cards) == ["tone", "slow", "tone16k"]
    assert cards["tone16k"]["sample_rate"] == 16000
    assert all(c["object"] == "model" for c in cards.values())


def test_voices_per_model(tone_server: Server) -> None:
    response = httpx.get(tone_server.url + "/v1/voices", headers=tone_server.headers)
    assert response.status_code == 200
    entries = {e["model"]: e for e in response.json()["data"]}
    assert entries["tone"] == {"model": "tone", "voices": ["low", "high"], "default_voice": "low"}
    one = httpx.get(tone_server.url + "/v1/voices", params={"model": "slow"}, headers=tone_server.headers)
    assert [e["model"] for e in one.json()["data"]] == ["slow"]
    missing = httpx.get(tone_server.url + "/v1/voices", params={"model": "nope"}, headers=tone_server.headers)
    assert missing.status_code == 404
    assert "tone, slow, tone16k" in error_of(missing)["message"]


def test_open_webuis_model_and_voice_lists(tone_server: Server) -> None:
    """Open WebUI reads {base}/audio/models and {base}/audio/voices from an OpenAI-compatible speech server (its
    audio router's get_available_models / get_available_voices): each voice once, named with its model."""
    models = httpx.get(tone_server.url + "/v1/audio/models", headers=tone_server.headers)
    assert models.status_code == 200 and models.json() == {
        "models": [{"id": "tone"}, {"id": "slow"}, {"id": "tone16k"}]
    }
    voices = httpx.get(tone_server.url + "/v1/audio/voices", headers=tone_server.headers)
    assert voices.json() == {"voices": [{"id": "low", "name": "low · tone"}, {"id": "high", "name": "high · tone"}]}
    one = httpx.get(tone_server.url + "/v1/audio/voices", params={"model": "slow"}, headers=tone_server.headers)
    assert one.json() == {"voices": [{"id": "low", "name": "low"}, {"id": "high", "name": "high"}]}
    missing = httpx.get(tone_server.url + "/v1/audio/voices", params={"model": "nope"}, headers=tone_server.headers)
    assert missing.status_code == 404


def test_web_page_is_served(tone_server: Server) -> None:
    page = httpx.get(tone_server.url + "/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "<title>ggtts</title>" in page.text
    script = httpx.get(tone_server.url + "/static/app.js")
    assert script.status_code == 200
    assert "/v1/audio/speech" in script.text


# ---- formats ----
def dominant_hz(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    return float(np.argmax(spectrum) * rate / len(samples))


@pytest.mark.parametrize("how", [{}, {"stream": False}], ids=["default", "whole"])
@pytest.mark.parametrize("model_name", ["tone", "tone16k"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_decodes_at_the_model_rate(
    tone_server: Server, fmt: str, model_name: str, how: dict[str, object]
) -> None:
    model = ToneModel(sample_rate=16000 if model_name == "tone16k" else 24000)
    body = {"model": model_name, "input": TEXT, "voice": "high", "response_format": fmt, **how}
    response = post(tone_server, body)
    assert response.status_code == 200, response.text
    # streamed by default (as OpenAI's endpoint), except flac; a whole file says its length
    streamed = not how and fmt != "flac"
    assert ("content-length" not in response.headers) == streamed, response.headers
    assert response.headers["x-sample-rate"] == str(model.sample_rate)
    samples, rate = decode(response.content, fmt, model.sample_rate)
    assert rate == model.sample_rate
    expected = model.expected(TEXT, "high")
    if fmt in ("wav", "flac", "pcm"):
        np.testing.assert_allclose(samples, expected, atol=2 / 32768)
    else:
        assert len(expected) <= len(samples) <= len(expected) + LOSSY_EXTRA_SAMPLES
        assert np.sqrt(np.mean(samples**2)) > 0.1  # the tone is there, not silence
        assert 420 <= dominant_hz(samples, rate) <= 550  # the high voice's 440-528 Hz, not noise or another pitch


STREAM_REQUESTS = [{"stream": True}, {"stream_format": "audio"}]


@pytest.mark.parametrize("how", STREAM_REQUESTS, ids=["stream", "stream_format"])
@pytest.mark.parametrize("fmt", STREAM_FORMATS)
def test_streamed_formats_decode(tone_server: Server, fmt: str, how: dict[str, object]) -> None:
    model = ToneModel()
    response = post(tone_server, {"model": "tone", "input": TEXT, "response_format": fmt, **how})
    assert response.status_code == 200, response.text
    samples, rate = decode(response.content, fmt, model.sample_rate)
    assert rate == model.sample_rate
    expected = model.expected(TEXT)
    if fmt in ("wav", "pcm"):
        np.testing.assert_allclose(samples, expected, atol=2 / 32768)
    else:
        assert len(expected) <= len(samples) <= len(expected) + LOSSY_EXTRA_SAMPLES


def test_openai_model_and_voice_names_mean_the_defaults(tone_server: Server) -> None:
    """Clients written for OpenAI send its names, often hard-coded: each model name is the server's default model,
    each voice name the model's default voice (where the model has no voice of that name)."""
    plain = post(tone_server, {"input": "one two", "response_format": "pcm"})
    assert plain.status_code == 200
    for model in ("tts-1", "tts-1-hd", "gpt-4o-mini-tts"):
        for voice in ("alloy", "shimmer", "verse"):
            body = {"model": model, "voice": voice, "input": "one two", "response_format": "pcm"}
            response = post(tone_server, body)
            assert response.status_code == 200 and response.content == plain.content, (model, voice)
    other = post(tone_server, {"model": "slow", "voice": "nova", "input": "one", "response_format": "pcm"})
    assert other.status_code == 200  # another model: its own default voice


def test_streamed_wav_header_is_open_ended(tone_server: Server) -> None:
    response = post(tone_server, {"model": "tone", "input": TEXT, "response_format": "wav", "stream": True})
    assert response.content[:4] == b"RIFF" and response.content[8:16] == b"WAVEfmt "
    assert response.content[40:44] == b"\xdb\xff\xff\xff"  # data size unknown: the maximum


def test_streaming_sends_first_bytes_before_synthesis_ends(tone_server: Server, tone_log: Path) -> None:
    """The first bytes arrive while later chunks are still to be made (the tone log says how many were): an order
    of events, not a time."""
    words = 6  # the slow model takes 0.3 s a word
    body = {"model": "slow", "input": " ".join(["early"] * words), "response_format": "pcm", "stream": True}
    with httpx.stream("POST", tone_server.url + SPEECH, json=body, headers=tone_server.headers) as response:
        assert response.status_code == 200
        chunks = response.iter_bytes()
        first = next(chunks)
        made_at_first = chunks_made(tone_log, "early")
        rest = b"".join(chunks)
    assert first
    assert made_at_first < words, f"the first bytes came after all {words} chunks were made"
    assert chunks_made(tone_log, "early") == words
    assert len(first) + len(rest) == len(ToneModel().expected(body["input"])) * 2


# ---- errors ----
ERROR_CASES = [
    ({"model": "nope", "input": "hi"}, 404, "model", ["'nope'", "tone, slow, tone16k"]),
    ({"input": "hi", "voice": "nobody"}, 400, "voice", ["'nobody'", "low, high"]),
    ({"input": "hi", "voice": "alloy:0.5,low:0.5"}, 400, "voice", ["'alloy'", "low, high"]),  # only a plain name
    ({"model": "tts-2", "input": "hi"}, 404, "model", ["'tts-2'", "tone, slow, tone16k"]),
    ({"input": "x" * (TONE_MAX_INPUT_CHARS + 1)}, 413, "input", [str(TONE_MAX_INPUT_CHARS)]),
    ({"input": "   "}, 400, "input", ["empty"]),
    ({"input": "hi", "speed": "fast"}, 422, "speed", ["number"]),
    ({"input": "hi", "speed": 5}, 422, "speed", ["4"]),
    ({"input": 42}, 422, "input", ["string"]),
    ({"voice": "low"}, 422, "input", ["'input' is required"]),
    ({"input": "hi", "sped": 1.5}, 422, "sped", ["not a field", "speed"]),
    ({"input": "hi", "response_format": "ogg"}, 422, "response_format", ["'wav'", "'aac'", "'pcm'"]),
    ({"input": "hi", "stream": "yes"}, 422, "stream", ["bool"]),
    ({"input": "hi", "stream_format": "events"}, 422, "stream_format", ["'audio'", "'sse'"]),
    ({"input": "hi", "instructions": "Speak cheerfully."}, 400, "instructions", ["cannot follow instructions"]),
    ({"input": "hi", "voice": {"id": "nobody"}}, 400, "voice", ["'nobody'", "low, high"]),
    ({"input": "hi", "voice": {"name": "low"}}, 422, "voice", []),
    (
        {"input": "hi", "stream": True, "response_format": "flac"},
        400,
        "response_format",
        ["cannot be streamed"],
    ),
    ({"input": "BADINPUT"}, 400, None, ["cannot say BADINPUT"]),
    # Kokoro-FastAPI's fields: a value out of range or of the wrong type, or one a model cannot honour
    ({"input": "hi", "volume_multiplier": 0}, 422, "volume_multiplier", ["greater than 0"]),
    ({"input": "hi", "volume_multiplier": -1}, 422, "volume_multiplier", ["greater than 0"]),
    ({"input": "hi", "volume_multiplier": 1e9}, 422, "volume_multiplier", ["less than or equal to 10"]),
    ({"input": "hi", "volume_multiplier": "2"}, 422, "volume_multiplier", ["number"]),
    ({"input": "hi", "return_download_link": True}, 400, "return_download_link", ["keeps no files"]),
    ({"input": "hi", "return_download_link": "no"}, 422, "return_download_link", ["bool"]),
    ({"input": "hi", "download_format": "ogg"}, 422, "download_format", ["'aac'"]),
    ({"input": "hi", "lang_code": "a"}, 400, "lang_code", ["'tone'", "no language option"]),
    ({"input": "hi", "lang_code": 1}, 422, "lang_code", ["string"]),
    (  # neither Kokoro-FastAPI's defaults nor all on: a choice the tone model cannot honour
        {"input": "hi", "normalization_options": {"url_normalization": False}},
        400,
        "normalization_options",
        ["cannot honour unit_normalization false, url_normalization false:", "Kokoro-FastAPI's defaults"],
    ),
    (
        {"input": "hi", "normalization_options": {"unit_normalization": True, "normalize": False}},
        400,
        "normalization_options",
        ["cannot honour normalize false:"],
    ),
    (
        {"input": "hi", "normalization_options": {"units": False}},
        422,
        "normalization_options.units",
        ["not a field of 'normalization_options'", "unit_normalization, url_normalization"],
    ),
    (
        {"input": "hi", "normalization_options": {"normalize": "false"}},
        422,
        "normalization_options.normalize",
        ["bool"],
    ),
    ({"input": "hi", "normalization_options": True}, 422, "normalization_options", ["object"]),
    # a lone surrogate is valid JSON ("\ud800"), not valid Unicode text
    ({"input": "hi", "voice": "low\ud800"}, 400, "voice", ["voice: the text is not valid Unicode", "U+D800"]),
    ({"input": "hi", "model": "\udfff"}, 400, "model", ["model: the text is not valid Unicode", "U+DFFF"]),
    ({"input": "hi", "lang_code": "a\ud800"}, 400, "lang_code", ["not valid Unicode"]),
    ({"input": "hi", "voice": "v" * 5000}, 400, "voice", ["is not available", "characters left out", "low"]),
    ({"input": "hi", "model": "m" * 5000}, 404, "model", ["characters left out", "available: "]),
    ({"input": "FAIL"}, 500, None, ["synthesis failed"]),
    (["input", "hi"], 422, None, ["JSON object"]),
]


@pytest.mark.parametrize(("body", "status", "param", "fragments"), ERROR_CASES)
def test_error_cases(tone_server: Server, body: object, status: int, param: str | None, fragments: list[str]) -> None:
    headers = {**tone_server.headers, "Content-Type": "application/json"}  # json.dumps escapes lone surrogates
    response = httpx.post(
        tone_server.url + SPEECH, content=json.dumps(body), headers=headers, timeout=REQUEST_TIMEOUT_S
    )
    assert response.status_code == status, response.text
    error = error_of(response)
    assert error["param"] == param
    for fragment in fragments:
        assert fragment in error["message"]
    assert len(error["message"]) <= 1000  # an echoed 30 KB name is cut
    assert error["type"] == ("server_error" if status >= 500 else "invalid_request_error")


def test_malformed_json_is_422(tone_server: Server) -> None:
    headers = {**tone_server.headers, "Content-Type": "application/json"}
    response = httpx.post(tone_server.url + SPEECH, content=b'{"input": "hi",', headers=headers)
    assert response.status_code == 422
    assert "not valid JSON" in error_of(response)["message"]


def test_nan_volume_is_422(tone_server: Server) -> None:
    headers = {**tone_server.headers, "Content-Type": "application/json"}
    for number in (b"NaN", b"Infinity"):  # Python's JSON reader takes them, though JSON has no such numbers
        body = b'{"input": "hi", "volume_multiplier": ' + number + b"}"
        response = httpx.post(tone_server.url + SPEECH, content=body, headers=headers)
        assert response.status_code == 422, number
        error = error_of(response)
        assert error["param"] == "volume_multiplier" and "finite number" in error["message"], error


@pytest.mark.parametrize(
    "fields",
    [
        {"download_format": "aac"},  # no effect without return_download_link, as in Kokoro-FastAPI
        {"return_download_link": False},
        {"volume_multiplier": None},  # 1
        {"normalization_options": {"unit_normalization": True}},  # all on: what every model does anyway
        {"normalization_options": {}},  # Kokoro-FastAPI's defaults: what its clients send unasked
        {"normalization_options": KOKORO_FASTAPI_NORMALIZATION},  # the same, each flag written out
        {"lang_code": None},
    ],
    ids=str,
)
def test_kokoro_fastapi_fields_that_ask_nothing_of_the_model(tone_server: Server, fields: dict[str, object]) -> None:
    response = post(tone_server, {"model": "tone", "input": TEXT, "response_format": "pcm", **fields})
    assert response.status_code == 200, response.text
    samples, _ = decode(response.content, "pcm", 24000)
    np.testing.assert_allclose(samples, ToneModel().expected(TEXT), atol=2 / 32768)


@pytest.mark.parametrize("how", [{}, *STREAM_REQUESTS], ids=["whole", "stream", "stream_format"])
@pytest.mark.parametrize("volume", [0.5, 2.0])
def test_volume_multiplier_scales_every_chunk(tone_server: Server, how: dict[str, object], volume: float) -> None:
    body = {"model": "tone", "input": TEXT, "response_format": "wav", "volume_multiplier": volume, **how}
    response = post(tone_server, body)
    assert response.status_code == 200, response.text
    samples, _ = decode(response.content, "wav", 24000)
    np.testing.assert_allclose(samples, ToneModel().expected(TEXT) * volume, atol=2 / 32768)


def test_oversized_body_is_refused_before_reading(tone_server: Server) -> None:
    headers = {**tone_server.headers, "Content-Type": "application/json"}
    response = httpx.post(tone_server.url + SPEECH, content=b" " * 10_000_000, headers=headers)
    assert response.status_code == 413
    assert error_of(response)["code"] == "input_too_long"


def test_unknown_route_is_404_json(tone_server: Server) -> None:
    response = httpx.get(tone_server.url + "/v1/nothing", headers=tone_server.headers)
    assert response.status_code == 404
    assert "/v1/nothing" in error_of(response)["message"]


# ---- access ----
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/models"),
        ("GET", "/v1/voices"),
        ("GET", "/v1/audio/voices"),
        ("POST", SPEECH),
        ("GET", "/v1/nothing"),
        ("GET", "/openapi.json"),
    ],
)
@pytest.mark.parametrize("key", [None, "wrong", API_KEY + "x"])
def test_routes_need_the_api_key(tone_server: Server, method: str, path: str, key: str | None) -> None:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    response = httpx.request(method, tone_server.url + path, json={"input": "hi"}, headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    error = error_of(response)
    assert error["code"] == "invalid_api_key" and "Bearer" in error["message"]


def test_right_key_opens_the_api(tone_server: Server) -> None:
    response = post(tone_server, {"input": "hi", "response_format": "wav"})
    assert response.status_code == 200


# ---- a real model file ----
# The tiny random model runs far slower than real time on a shared 2-core CPU: keep its texts short.
KOKORO_TEXT = "hello there. a test."


def test_kokoro_models_and_voices(kokoro_server: Server) -> None:
    models = httpx.get(kokoro_server.url + "/v1/models").json()["data"]
    assert [(m["id"], m["architecture"], m["sample_rate"]) for m in models] == [("tiny", "kokoro", 24000)]
    voices = httpx.get(kokoro_server.url + "/v1/voices").json()["data"]
    assert voices == [{"model": "tiny", "voices": ["v_one", "v_two"], "default_voice": "v_one"}]


@pytest.mark.parametrize("fmt", FORMATS)
def test_kokoro_each_format_decodes(kokoro_server: Server, fmt: str) -> None:
    body = {"model": "tiny", "input": KOKORO_TEXT, "voice": "v_two", "response_format": fmt}
    response = post(kokoro_server, body)
    assert response.status_code == 200, response.text
    samples, rate = decode(response.content, fmt, 24000)
    assert rate == 24000
    assert len(samples) > 2400 and np.isfinite(samples).all()


@pytest.mark.parametrize("fmt", STREAM_FORMATS)
def test_kokoro_streamed_formats_decode(kokoro_server: Server, fmt: str) -> None:
    response = post(kokoro_server, {"input": KOKORO_TEXT, "response_format": fmt, "stream": True})
    assert response.status_code == 200, response.text
    samples, rate = decode(response.content, fmt, 24000)
    assert rate == 24000 and len(samples) > 2400


def test_kokoro_stream_equals_whole(kokoro_server: Server) -> None:
    whole = post(kokoro_server, {"input": KOKORO_TEXT, "response_format": "pcm"})
    streamed = post(kokoro_server, {"input": KOKORO_TEXT, "response_format": "pcm", "stream": True})
    assert whole.status_code == streamed.status_code == 200
    assert streamed.content == whole.content


def test_kokoro_options_object_takes_its_per_call_options(kokoro_server: Server) -> None:
    """Kokoro's per-call options in the request's ``options`` object: the seed of its vocoder's noise (the same
    seed, the same audio; another, other audio), ``/v1/models`` lists them, an option of no served model is a 422."""

    def speak(options: dict[str, object]) -> httpx.Response:
        return post(kokoro_server, {"input": KOKORO_TEXT, "response_format": "pcm", "options": options})

    default, three, again = speak({}), speak({"seed": 3}), speak({"seed": 3})
    assert default.status_code == three.status_code == again.status_code == 200
    assert three.content == again.content and three.content != default.content
    assert speak({"seed": 0}).content == default.content  # 0 is the default seed
    card = httpx.get(kokoro_server.url + "/v1/models", headers=kokoro_server.headers).json()["data"][0]
    assert [o["name"] for o in card["options"]] == ["phonemes", "seed"]
    unknown = speak({"temperature": 0.5})
    assert unknown.status_code == 422
    assert error_of(unknown)["message"] == (
        "'options.temperature' is not a field of 'options'; the fields are: phonemes, seed"
    )
    bad = speak({"seed": -1})
    assert bad.status_code == 400 and error_of(bad)["param"] == "options.seed"


def test_kokoro_streams_the_first_sentence_as_a_chunk_of_its_own(kokoro_server: Server) -> None:
    """A short first sentence, then a long rest: the pipeline speaks the first sentence as a chunk of its own (its
    quick start), so it can be sent long before the rest is synthesized. Counted in chunks (the captioned stream
    sends one line per chunk), not timed: that the server sends each chunk as it comes is the tone model's test."""
    import base64
    import json

    rest = "three four five six seven eight nine ten eleven twelve. " * 6
    body = {"input": "one two. " + rest, "response_format": "pcm", "stream": True}
    response = httpx.post(kokoro_server.url + "/v1/audio/captioned_speech", json=body, timeout=REQUEST_TIMEOUT_S)
    assert response.status_code == 200
    chunks = [base64.b64decode(json.loads(line)["audio"]) for line in response.text.splitlines()]
    assert len(chunks) >= 2 and len(chunks[0]) < sum(len(c) for c in chunks) / 4
    assert [w["word"] for w in json.loads(response.text.splitlines()[0])["timestamps"]] == ["one", "two"]


def test_kokoro_unknown_voice_names_the_voices(kokoro_server: Server) -> None:
    response = post(kokoro_server, {"input": "hi.", "voice": "af_heart"})
    assert response.status_code == 400
    assert "v_one, v_two" in error_of(response)["message"]


def test_kokoro_fastapis_blend_form_is_the_same_blend(kokoro_server: Server) -> None:
    """Kokoro-FastAPI's clients send "a(2)+b(1)" and "a+b": the same voices as ggtts's "a:2,b:1" and "a,b"."""

    def pcm(voice: str) -> bytes:
        response = post(kokoro_server, {"input": "hi.", "voice": voice, "response_format": "pcm"})
        assert response.status_code == 200, response.text
        return response.content

    weighted, equal = pcm("v_one:2,v_two:1"), pcm("v_one,v_two")
    assert weighted != equal and weighted != pcm("v_one")
    assert pcm("v_one(2)+v_two(1)") == weighted and pcm("v_one+v_two") == equal
    subtracted = post(kokoro_server, {"input": "hi.", "voice": "v_one-v_two"})
    assert subtracted.status_code == 400 and "subtracts voices" in error_of(subtracted)["message"]


def test_kokoro_voice_mix_of_known_voices(kokoro_server: Server) -> None:
    assert post(kokoro_server, {"input": "hi.", "voice": "v_one:0.5,v_two:0.5"}).status_code == 200
    assert post(kokoro_server, {"input": "hi.", "voice": "v_one,v_two"}).status_code == 200
    for voice, fragment in [
        ("v_one,nope", "'nope'"),
        ("nobody:1", "'nobody'"),
        ("x:/etc/passwd", "'x'"),
        ("v_one:0.5,v_two:/etc/foo.json", "'/etc/foo.json'"),
    ]:
        response = post(kokoro_server, {"input": "hi.", "voice": voice})
        assert response.status_code == 400, voice
        error = error_of(response)
        assert error["param"] == "voice"
        assert fragment in error["message"], error
    assert "v_one, v_two" in error_of(post(kokoro_server, {"input": "hi.", "voice": "x:/etc/passwd"}))["message"]


@pytest.mark.parametrize("voice", ["nobody:1", "x:/etc/passwd", "low,/etc/foo.json"])
def test_voice_blend_of_unknown_names_is_400(tone_server: Server, voice: str) -> None:
    response = post(tone_server, {"model": "tone", "input": "hi", "voice": voice})
    assert response.status_code == 400
    error = error_of(response)
    assert error["param"] == "voice" and error["code"] == "voice_not_found"
    assert "choose one of: low, high" in error["message"]
