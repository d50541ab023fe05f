"""``ggtts serve`` with a Qwen3-Omni thinker (a tiny transformers-built one, its talker and audio encoder beside
it): the talker's speakers as voices, whole and streamed speech that agree, a 4xx for a voice the model lacks; and
OpenAI's audio chat (``/v1/chat/completions``) through OpenAI's own client: audio in, text and audio out, whole and
streamed, the same answer as ``model.chat`` gives in process, and one clear 4xx for each bad request."""

from __future__ import annotations

import base64
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from server_support import Server, check_normalization_options_reach_the_markup, start_server, stop_server

pytestmark = pytest.mark.needs_reference

SPEECH = "/v1/audio/speech"
TIMEOUT_S = 120
TEXT = "Hello, world! How are you today?"


@pytest.fixture(scope="module")
def omni_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    pytest.importorskip("transformers", reason="needs transformers to build the reference model")
    from ggtts.convert.qwen3omni_audio import convert_qwen3omni_audio
    from ggtts.convert.qwen3omni_talker import convert_qwen3omni_talker
    from ggtts.convert.qwen3omni_thinker import convert_qwen3omni_thinker
    from ggtts.measure.qwen3omni.upstream import build_tiny_checkpoint

    work = tmp_path_factory.mktemp("qwen3omni-server")
    build_tiny_checkpoint(work / "checkpoint", seed=1)
    thinker = convert_qwen3omni_thinker([work / "checkpoint"], work / "thinker.gguf", "f32")
    convert_qwen3omni_talker([work / "checkpoint"], work / "talker.gguf", "q8_0")  # beside the thinker: found there
    convert_qwen3omni_audio([work / "checkpoint"], work / "mmproj.gguf", "f16")
    cmd = [str(Path(sys.executable).parent / "ggtts"), "serve", "-m", f"omni={thinker}"]
    server = start_server(cmd, tmp_path_factory.mktemp("qwen3omni-server-log") / "server.log")
    yield server
    stop_server(server)


def post(server: Server, body: dict[str, object]) -> httpx.Response:
    return httpx.post(server.url + SPEECH, json={"model": "omni", **body}, timeout=TIMEOUT_S)


def test_voices_are_the_talkers_speakers(omni_server: Server) -> None:
    voices = httpx.get(omni_server.url + "/v1/voices").json()["data"]
    assert voices == [{"model": "omni", "voices": ["chelsie", "ethan"], "default_voice": "ethan"}]
    models = httpx.get(omni_server.url + "/v1/models").json()["data"]
    assert [(m["id"], m["architecture"], m["sample_rate"]) for m in models] == [("omni", "qwen3omnimoe", 24000)]


def test_whole_and_streamed_speech_agree(omni_server: Server) -> None:
    whole = post(omni_server, {"input": TEXT, "voice": "chelsie", "response_format": "pcm"})
    streamed = post(omni_server, {"input": TEXT, "voice": "chelsie", "response_format": "pcm", "stream": True})
    assert whole.status_code == streamed.status_code == 200, whole.text
    samples = np.frombuffer(whole.content, dtype="<i2")
    assert len(samples) >= 4 * 24 and np.abs(samples).max() > 0  # at least four frames of 24 samples
    assert streamed.content == whole.content


def test_an_unknown_voice_is_a_400_and_the_server_goes_on(omni_server: Server) -> None:
    bad = post(omni_server, {"input": TEXT, "voice": "Nobody"})
    assert bad.status_code == 400
    assert "voice 'Nobody' is not available" in bad.json()["error"]["message"]
    assert post(omni_server, {"input": "Hello.", "voice": "ethan", "response_format": "pcm"}).status_code == 200


def test_normalization_options_take_the_markup_away_or_keep_it(omni_server: Server) -> None:
    check_normalization_options_reach_the_markup(lambda body: post(omni_server, body), "chelsie")


CHAT = "/v1/chat/completions"
QUESTION = "What do you hear?"
FRAMES = 40  # the talker's frames at most (options.max_frames): the tiny talker seldom ends by itself


def _wav(seconds: float) -> bytes:
    import io

    import soundfile

    from ggtts.measure.qwen3omni.parity import question_audio

    buf = io.BytesIO()
    soundfile.write(buf, question_audio(seconds), 16000, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def _asked(seconds: float = 2.53) -> list[dict[str, object]]:
    data = base64.b64encode(_wav(seconds)).decode("ascii")
    parts = [
        {"type": "text", "text": QUESTION},
        {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}},
    ]
    return [{"role": "system", "content": "Be brief."}, {"role": "user", "content": parts}]


def _client(server: Server) -> Any:
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=TIMEOUT_S)


def test_openai_client_asks_with_audio_and_hears_the_answer(omni_server: Server) -> None:
    """Whole and streamed (pcm16, as OpenAI streams audio): the same transcript as ``model.chat`` in process, and
    the same speech, byte for byte (the talker seeded alike); as WAV, the same samples."""
    import io

    import soundfile

    import ggtts
    from ggtts.audio import Audio

    client = _client(omni_server)
    asked = dict(model="omni", modalities=["text", "audio"], messages=_asked(), max_completion_tokens=12, seed=3,
                 extra_body={"options": {"max_frames": FRAMES}})  # fmt: skip
    whole = client.chat.completions.create(audio={"voice": "alloy", "format": "pcm16"}, **asked)
    message = whole.choices[0].message
    assert message.content is None and message.audio is not None and message.audio.id.startswith("audio_")
    pcm_whole = np.frombuffer(base64.b64decode(message.audio.data), "<i2")
    assert pcm_whole.size > 0 and np.abs(pcm_whole).max() > 0
    model = ggtts.load(_thinker(omni_server))
    local = model.chat(QUESTION, audio=_wav(2.53), system="Be brief.", max_reply_tokens=12, max_frames=FRAMES, seed=3)
    assert message.audio.transcript == local.text
    assert np.array_equal(np.frombuffer(Audio.concatenate(list(local.audio)).pcm16(), "<i2"), pcm_whole)
    assert whole.usage.completion_tokens == len(local.tokens) and whole.usage.prompt_tokens == local.prompt_tokens
    assert whole.choices[0].finish_reason == ("stop" if local.finished else "length")

    stream = client.chat.completions.create(audio={"voice": "alloy", "format": "pcm16"}, stream=True,
                                            stream_options={"include_usage": True}, **asked)  # fmt: skip
    transcript, pcm, finish, usage, ids = "", b"", None, None, set()
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            audio = choice.delta.audio  # OpenAI's client types it (ChoiceDeltaAudio)
            if audio is not None:
                ids.add(audio.id)
                transcript += audio.transcript or ""
                pcm += base64.b64decode(audio.data or "")
            finish = choice.finish_reason or finish
    assert transcript == local.text and finish == whole.choices[0].finish_reason
    assert len(ids) == 1 and ids != {message.audio.id}  # one id through the answer, a new one for each answer
    assert usage is not None and usage.total_tokens == whole.usage.total_tokens
    assert np.array_equal(np.frombuffer(pcm, "<i2"), pcm_whole)

    as_wav = client.chat.completions.create(audio={"voice": "alloy", "format": "wav"}, **asked).choices[0].message
    wav, rate = soundfile.read(io.BytesIO(base64.b64decode(as_wav.audio.data)), dtype="int16")
    assert rate == 24000 and wav.size == pcm_whole.size
    # two conversions to 16 bits: soundfile scales by 32768, ggtts by 32767
    assert np.abs(wav.astype(np.int32) - pcm_whole).max() <= 1


def _thinker(server: Server) -> str:
    args = list(server.process.args)  # type: ignore[arg-type]
    return str(args[args.index("-m") + 1]).split("=", 1)[1]


def test_openai_client_asks_in_text_and_reads_the_answer(omni_server: Server) -> None:
    client = _client(omni_server)
    whole = client.chat.completions.create(model="omni", messages=[{"role": "user", "content": TEXT}],
                                           max_completion_tokens=6)  # fmt: skip
    assert whole.choices[0].message.content and whole.choices[0].message.audio is None
    streamed = client.chat.completions.create(model="omni", messages=[{"role": "user", "content": TEXT}],
                                              max_completion_tokens=6, stream=True)  # fmt: skip
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == whole.choices[0].message.content


@pytest.mark.parametrize(
    ("change", "status", "message"),
    [
        ({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                       {"role": "user", "content": "Again"}]}, 400, "earlier assistant turns are not supported"),
        ({"modalities": ["text", "audio"]}, 400, 'give audio: {"voice", "format"}'),
        ({"audio": {"voice": "ethan", "format": "wav"}}, 400, 'modalities lacks "audio"'),
        ({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "@@@"}}]}]},
         400, "input_audio.data is not base64"),
        ({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {
            "data": base64.b64encode(bytes(32044)).decode()}}]}]}, 400, "not an audio file that can be decoded"),
        ({"modalities": ["text", "audio"], "audio": {"voice": "Nobody", "format": "wav"}}, 400,
         "voice 'Nobody' is not available"),
        ({"temperature_of_the_sun": 5}, 422, "temperature_of_the_sun"),
        ({"max_completion_tokens": 0}, 422, "max_completion_tokens"),
        ({"options": {"talker": "/elsewhere.gguf"}}, 400, "has no option 'talker'"),
        ({"options": {"max_frames": 0}}, 400, "options.max_frames"),
        ({"messages": [{"role": "system", "content": "Only a system turn."}]}, 400, "there is no user turn"),
    ],
)  # fmt: skip
def test_a_bad_chat_request_gets_one_clear_error(omni_server: Server, change: dict, status: int, message: str) -> None:
    body = {"model": "omni", "messages": [{"role": "user", "content": TEXT}], "max_completion_tokens": 4, **change}
    r = httpx.post(omni_server.url + CHAT, json=body, timeout=TIMEOUT_S)
    assert r.status_code == status, r.text
    assert message in r.json()["error"]["message"]


def test_silent_audio_is_a_400_and_long_audio_fits_the_chat_body(omni_server: Server) -> None:
    import io

    import soundfile

    buf = io.BytesIO()
    soundfile.write(buf, np.zeros(16000, np.float32), 16000, format="WAV")
    parts = [{"type": "input_audio", "input_audio": {"data": base64.b64encode(buf.getvalue()).decode()}}]
    body = {"model": "omni", "messages": [{"role": "user", "content": parts}], "max_completion_tokens": 2}
    r = httpx.post(omni_server.url + CHAT, json=body, timeout=TIMEOUT_S)
    assert r.status_code == 400 and "is silent" in r.json()["error"]["message"]
    long = {"model": "omni", "messages": _asked(60.0), "max_completion_tokens": 2}  # 2.6 MB of base64: past speech's
    r = httpx.post(omni_server.url + CHAT, json=long, timeout=TIMEOUT_S)
    assert r.status_code == 200, r.text
    assert len(r.request.content) > 2_000_000
    speech = {"model": "omni", "input": "x" * 10, "voice": _asked(60.0)}  # the same size on the speech path: 413
    r = httpx.post(omni_server.url + SPEECH, json=speech, timeout=TIMEOUT_S)
    assert r.status_code == 413
