"""A family defined here alone (a sine "model" with one voice, one option and one load option) gets the whole of
ggtts: ``ggtts speak`` and its flags, the load option on ``serve``/``batch``/``eval`` and in ``ggtts.load``,
``ggtts info``, the server's ``/v1/models``, ``/v1/voices`` and ``/v1/audio/speech``, and the option
and voice errors, without any file outside this test knowing about it."""

from __future__ import annotations

import dataclasses
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
import torch

import ggtts
from ggtts.audio import Audio
from ggtts.cli import main
from ggtts.families import register_family, unregister_family
from ggtts.families.base import (
    Capabilities,
    Companion,
    Family,
    LoadOptions,
    Request,
    TTSModel,
    UnknownVoiceError,
    VoiceBlendError,
    VoiceMix,
    check_number,
    option,
)
from ggtts.gguf import GGUFFile, ModelWriter
from skeleton_gguf import skeleton_gguf

ARCH = "toy-sine"
SAMPLE_RATE = 16000
VOICES_KEY = f"{ARCH}.voices"
SECONDS_PER_WORD = 0.25


@dataclass(frozen=True)
class SineOptions:
    pitch: float = option(220.0, "the sine's frequency in Hz (default 220)", flag="--pitch")
    repeats: int = option(1, "each word said this many times", check=check_number("repeats", 1, whole=True))


def _positive(value: float) -> float:
    if not value > 0:
        raise ggtts.InputError(f"loudness must be positive, got {value}")
    return value


@dataclass(frozen=True)
class SineLoadOptions(LoadOptions):
    loudness: float = option(1.0, "scales the file's gain (default 1)", flag="--loudness", check=_positive)


class SineModel(TTSModel):
    """One sine burst per word, at ``pitch`` Hz, scaled by the file's one weight (times ``loudness``)."""

    def __init__(self, gain: float, voices: list[str], device: str) -> None:
        self.gain, self._voices, self.sample_rate, self.device = gain, voices, SAMPLE_RATE, device

    @classmethod
    def from_gguf(cls, gguf: GGUFFile, device: str = "cpu", **options: Any) -> SineModel:
        loudness = SineLoadOptions(**options).loudness
        return cls(loudness * float(gguf.tensor("gain")[0]), [str(v) for v in gguf.get(VOICES_KEY)], device)

    @property
    def voices(self) -> list[str]:
        return self._voices

    def run(self, request: Request[SineOptions]) -> Iterator[Audio]:
        # the template checked the text, the voice, the speed and the options, and built SineOptions
        n = round(SECONDS_PER_WORD * SAMPLE_RATE / request.speed)
        for _ in request.text.split() * request.options.repeats:
            t = np.arange(n) / SAMPLE_RATE
            yield Audio((self.gain * np.sin(2 * np.pi * request.options.pitch * t)).astype(np.float32), SAMPLE_RATE)


def _voices(gguf: GGUFFile) -> list[str]:
    return [str(v) for v in gguf.get(VOICES_KEY) or []]


def write_toy(path: Path, gain: float) -> Path:
    writer = ModelWriter(path, ARCH)
    writer.add(VOICES_KEY, ["hum"])
    writer.add_tensor("gain", torch.tensor([gain]))
    return writer.write()


def convert_toy(sources: list[Path], out: Path, out_type: str) -> Path:
    """The toy's "upstream checkpoint": a text file holding the gain."""
    return write_toy(out, float(sources[0].read_text()))


FAMILY = Family(
    name="toy",
    description="a sine per word, for the tests",
    architectures=(ARCH,),
    pipeline=SineModel,
    options=SineOptions,
    load_options=SineLoadOptions,
    capabilities=Capabilities(max_input_chars=200),
    voices=_voices,
    converters={"toy": f"{__name__}:convert_toy"},
)
SineModel.family = FAMILY


@pytest.fixture
def toy(tmp_path: Path) -> Iterator[Path]:
    path = write_toy(tmp_path / "toy.gguf", 0.5)
    register_family(FAMILY)
    try:
        yield path
    finally:
        unregister_family(FAMILY.name)


def _tone(samples: np.ndarray) -> float:
    """The strongest frequency in ``samples`` (Hz)."""
    spectrum = np.abs(np.fft.rfft(samples))
    return float(np.argmax(spectrum) * SAMPLE_RATE / len(samples))


def test_speak_with_its_flag(toy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "toy.wav"
    assert main(["speak", "-m", str(toy), "one two", "--pitch", "440", "-o", str(out)]) == 0
    samples, rate = sf.read(out, dtype="float32")
    assert rate == SAMPLE_RATE and len(samples) == 2 * SECONDS_PER_WORD * SAMPLE_RATE
    assert _tone(samples) == pytest.approx(440, abs=5)
    assert np.abs(samples).max() == pytest.approx(0.5, abs=1e-3)
    with pytest.raises(SystemExit):
        main(["speak", "--help"])
    assert "--pitch PITCH" in capsys.readouterr().out


def test_its_load_option_on_every_command_line_and_in_the_api(
    toy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "loud.wav"
    assert main(["speak", "-m", str(toy), "one", "--loudness", "0.5", "--device", "cpu", "-o", str(out)]) == 0
    samples, _ = sf.read(out, dtype="float32")
    assert np.abs(samples).max() == pytest.approx(0.25, abs=1e-3)
    assert capsys.readouterr().err.startswith("ggtts: wrote ")  # the CPU of a machine without a GPU: nothing to say
    model = ggtts.load(toy, loudness=2.0, device="cpu")
    assert model.gain == pytest.approx(1.0) and model.device == "cpu"
    for command in ("speak", "serve", "batch", "eval"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = capsys.readouterr().out
        assert "--loudness LOUDNESS" in text and "scales the file's gain" in text, command
        assert "--device DEVICE" in text, command
    # refused before any weight is read, in one line: its check, an option it lacks, a device there is not
    with pytest.raises(ggtts.InputError, match="loudness must be positive, got -1"):
        ggtts.load(toy, loudness=-1.0)
    with pytest.raises(
        ggtts.InputError, match="toy has no load option 'precision'; it takes device, lexicon, loudness"
    ):
        ggtts.load(toy, precision="bfloat16")
    assert main(["speak", "-m", str(toy), "one", "--precision", "bfloat16", "-o", str(out)]) == 1
    assert "toy has no load option 'precision'; it takes device, lexicon, loudness" in capsys.readouterr().err
    assert main(["speak", "-m", str(toy), "one", "--precision", "float32", "-o", str(out)]) == 0  # asks nothing
    assert main(["speak", "-m", str(toy), "one", "--device", "tpu", "-o", str(out)]) == 1
    assert "unknown device 'tpu'; use one of auto, cpu, cuda, cuda:N" in capsys.readouterr().err


def test_auto_and_a_cuda_device_where_there_is_none(
    toy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "x.wav"
    assert main(["speak", "-m", str(toy), "one", "--device", "cuda", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "device cuda asked for, but there is no CUDA GPU here" in err
    assert "use --device cpu" in err and not out.exists()
    assert main(["speak", "-m", str(toy), "one", "-o", str(out)]) == 0  # auto, the default: the CPU
    monkeypatch.setattr("ggtts.runtime.device.NVIDIA_DRIVER", tmp_path)  # "an NVIDIA driver is loaded"
    assert main(["speak", "-m", str(toy), "one", "-o", str(out)]) == 0
    assert "ggtts: running on the CPU: an NVIDIA GPU is here, but torch" in capsys.readouterr().err
    assert ggtts.load(toy).device == "cpu"  # type: ignore[attr-defined]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert ggtts.load(toy).device == "cuda"  # type: ignore[attr-defined]
    with pytest.raises(
        ggtts.InputError, match=r"device cuda:1 asked for, but this machine has 1 CUDA GPU \(cuda:0 to cuda:0\)"
    ):
        ggtts.load(toy, device="cuda:1")


def test_info_names_the_family_and_its_voices(toy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", str(toy)]) == 0
    out = capsys.readouterr().out
    assert f"architecture: {ARCH}\n" in out
    assert "family: toy (a sine per word, for the tests)" in out
    assert "voices (1): hum" in out
    assert "capabilities: speed 0.25 to 4; up to 200 characters; streaming" in out
    assert ggtts.list_families()[-1] == "toy" and ARCH in ggtts.architectures()


def test_option_and_voice_errors(toy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = ggtts.load(toy)
    assert (model.family_name, model.architecture, model.voices) == ("toy", ARCH, ["hum"])
    with pytest.raises(ggtts.InputError, match=r"toy has no language option \(lang\)"):
        model.synthesize("hello", lang="a")
    with pytest.raises(ggtts.InputError, match=r"unknown option 'pich' for toy; known: pitch"):
        model.synthesize("hello", pich=300)
    with pytest.raises(ggtts.InputError, match=r"unknown voice 'nobody'; choose one of hum"):
        model.synthesize("hello", voice="nobody")
    with pytest.raises(ggtts.InputError, match=r"toy cannot blend voices; choose one of hum"):
        model.synthesize("hello", voice="hum:0.5,hum:0.5")  # its capabilities say it does not blend
    with pytest.raises(ggtts.InputError, match=r"speed 4.5 is out of range; use 0.25 to 4.0"):
        model.synthesize("hello", speed=4.5)
    with pytest.raises(ggtts.InputError, match=r"voice must be a voice's name, got 3"):
        model.synthesize("hello", voice=3)  # type: ignore[arg-type]
    with_companion = dataclasses.replace(FAMILY, companions=(Companion("vocoder", "wavtokenizer-dec", "its vocoder"),))
    with pytest.raises(ggtts.InputError, match=r"vocoder must be a file's path, got 5"):
        with_companion.check_load_options({"vocoder": 5})
    with_companion.check_load_options({"vocoder": tmp_path / "v.gguf"})  # a path is fine (found at load)
    out = tmp_path / "x.wav"
    assert main(["speak", "-m", str(toy), "hello", "--seed", "3", "-o", str(out)]) == 1
    assert "unknown option 'seed' for toy; known: pitch" in capsys.readouterr().err
    assert main(["speak", "-m", str(toy), "hello", "-v", "nobody", "-o", str(out)]) == 1
    assert "unknown voice 'nobody'; choose one of hum" in capsys.readouterr().err
    assert not out.exists()


def test_server_lists_and_speaks(toy: Path) -> None:
    from fastapi.testclient import TestClient

    from ggtts.server.app import create_app
    from ggtts.server.settings import ServerSettings

    with TestClient(create_app({"sine": ggtts.load(toy)}, ServerSettings())) as client:
        models = client.get("/v1/models").json()["data"]
        cards = [(m["id"], m["family"], m["architecture"], m["sample_rate"]) for m in models]
        assert cards == [("sine", "toy", ARCH, SAMPLE_RATE)]
        voices = client.get("/v1/voices").json()["data"]
        assert voices == [{"model": "sine", "voices": ["hum"], "default_voice": "hum"}]
        body = {"model": "sine", "input": "a b c", "voice": "hum", "stream": False}  # a whole mp3: exact length
        response = client.post("/v1/audio/speech", json=body)
        assert response.status_code == 200
        samples, rate = sf.read(io.BytesIO(response.content), dtype="float32")
        assert rate == SAMPLE_RATE and len(samples) == 3 * SECONDS_PER_WORD * SAMPLE_RATE
        bad = client.post("/v1/audio/speech", json={"model": "sine", "input": "a", "voice": "nobody"})
        assert bad.status_code == 400 and "choose one of: hum" in bad.json()["error"]["message"]
        blend = client.post("/v1/audio/speech", json={"model": "sine", "input": "a", "voice": "hum,hum"})
        assert blend.status_code == 400 and blend.json()["error"]["param"] == "voice"
        assert "toy cannot blend voices" in blend.json()["error"]["message"]


class _Plain(TTSModel):
    """A model of no family: it takes no options."""

    sample_rate, voices = SAMPLE_RATE, ["flat"]

    @classmethod
    def from_gguf(cls, gguf: GGUFFile, device: str = "cpu", **options: Any) -> _Plain:
        return cls()

    def stream(self, text: str, voice: str | VoiceMix | None = None, speed: float = 1.0, **options: Any
               ) -> Iterator[Audio]:  # fmt: skip
        yield Audio(np.zeros(160, np.float32), SAMPLE_RATE)


def test_its_options_in_the_server_schema_and_requests(toy: Path) -> None:
    """The family's per-call options, from its dataclass alone: in ``/v1/models``, in the OpenAPI schema with
    their help, in a request's ``options`` object (checked by the family: a 400 naming the field), and refused for
    a model that does not take them."""
    from fastapi.testclient import TestClient

    from ggtts.server.app import create_app
    from ggtts.server.settings import ServerSettings

    with TestClient(create_app({"sine": ggtts.load(toy), "plain": _Plain()}, ServerSettings())) as client:
        cards = {m["id"]: m["options"] for m in client.get("/v1/models").json()["data"]}
        assert cards == {
            "sine": [
                {"name": "pitch", "type": "float", "default": 220.0,
                 "description": "the sine's frequency in Hz (default 220)"},
                {"name": "repeats", "type": "int", "default": 1, "description": "each word said this many times"},
            ],
            "plain": [],
        }  # fmt: skip
        schema = client.get("/openapi.json").json()["components"]["schemas"]["ModelOptions"]["properties"]
        assert schema["pitch"]["description"] == "the sine's frequency in Hz (default 220)"
        assert {"type": "integer"} in schema["repeats"]["anyOf"]

        def speak(model: str, options: dict[str, Any]) -> Any:
            body = {"model": model, "input": "a b", "response_format": "wav", "options": options}
            return client.post("/v1/audio/speech", json=body)

        response = speak("sine", {"pitch": 440, "repeats": 2})
        assert response.status_code == 200
        samples, _ = sf.read(io.BytesIO(response.content), dtype="float32")
        assert len(samples) == 4 * SECONDS_PER_WORD * SAMPLE_RATE and _tone(samples) == pytest.approx(440, abs=5)
        bad = speak("sine", {"repeats": 0})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "options.repeats"
        assert "repeats" in bad.json()["error"]["message"]
        unknown = speak("sine", {"seed": 1})
        assert unknown.status_code == 422
        assert "'options.seed' is not a field of 'options'; the fields are: pitch, repeats" in unknown.text
        loose = speak("sine", {"repeats": 1.5})
        assert loose.status_code == 422 and "options.repeats" in loose.text
        other = speak("plain", {"pitch": 300})
        assert other.status_code == 400 and other.json()["error"]["param"] == "options.pitch"
        assert (
            "model 'plain' (" in other.json()["error"]["message"]
            and "has no option 'pitch'; it takes none" in (other.json()["error"]["message"])
        )
        assert speak("plain", {}).status_code == 200


def test_measurement_commands_come_from_the_records(toy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "-m", str(toy), "--against", "onnx"]) == 1
    assert f"{toy}: no benchmark for the toy family yet" in capsys.readouterr().err
    assert main(["parity", "toy"]) == 1
    assert "no parity check for 'toy'; available: kokoro" in capsys.readouterr().err


def test_convert_names_come_from_the_records(toy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "gain.txt"
    source.write_text("0.25")
    out = tmp_path / "converted.gguf"
    assert main(["convert", "toy", str(source), "-o", str(out)]) == 0
    assert float(GGUFFile(out).tensor("gain")[0]) == 0.25
    assert main(["convert", "tacotron", str(source), "-o", str(tmp_path / "t.gguf")]) == 1
    assert (
        "unknown model family 'tacotron'; choose one of kokoro, outetts, wavtokenizer, magpie, nanocodec, "
        "qwen3omni-thinker, qwen3omni-talker, qwen3omni-mmproj, piper, qwen3tts, toy" in capsys.readouterr().err
    )


def test_the_request_template_converts_whole_numbers_and_checks_a_resolved_voice(toy: Path) -> None:
    model = ggtts.load(toy)
    one = model.synthesize("one two")
    assert len(model.synthesize("one two", repeats=2.0)) == 2 * len(one)  # 2.0 arrives as the int 2
    with pytest.raises(ggtts.InputError, match=r"repeats must be a whole number of at least 1, got 1\.5"):
        model.synthesize("one", repeats=1.5)
    with pytest.raises(UnknownVoiceError, match="nobody"):  # a VoiceMix from elsewhere is checked again
        model.synthesize("one", voice=VoiceMix((("nobody", 1.0),)))
    with pytest.raises(VoiceBlendError):
        model.synthesize("one", voice=VoiceMix((("hum", 0.5), ("hum", 0.5))))
    assert len(model.synthesize("one", voice=VoiceMix((("hum", 1.0),)))) == len(model.synthesize("one"))


def test_a_batch_checks_load_options_against_the_models_its_items_name(toy: Path, tmp_path: Path) -> None:
    """Items may name their own model: with one family, a load option it does not take is refused up front; with
    several, each model gets the options its family takes (as a server of several models), one that none takes is
    refused; a file that does not open fails its items alone."""
    from ggtts.batch.items import Item
    from ggtts.batch.job import check_job
    from ggtts.batch.work import JobSettings, own_load_options

    def items(*models: str | None) -> list[Item]:
        return [Item(id=str(i), text="one", model=m) for i, m in enumerate(models)]

    settings = JobSettings(out_dir=tmp_path / "out", load_options={"loudness": 2.0})
    check_job(settings, items=items(str(toy), str(tmp_path / "missing.gguf")))  # every item the toy's
    with pytest.raises(ggtts.InputError, match="kokoro has no load option 'loudness'"):
        check_job(settings, items=items(None, None))  # Kokoro alone
    check_job(settings, items=items(str(toy), None))  # the toy's option for the toy, none of it for Kokoro
    assert own_load_options(None, {"loudness": 2.0, "device": "cpu"}) == {"device": "cpu"}
    assert own_load_options(str(toy), {"loudness": 2.0}) == {"loudness": 2.0}
    with pytest.raises(
        ggtts.InputError, match=r"no model of this job takes the load option 'parallel' \(families: kokoro, toy\)"
    ):
        check_job(dataclasses.replace(settings, load_options={"parallel": 2}), items=items(str(toy), None))
    with pytest.raises(ggtts.InputError, match="loudness must be positive"):
        check_job(dataclasses.replace(settings, load_options={"loudness": -1.0}), items=items(str(toy)))


def test_a_batch_of_several_families_keys_each_item_by_its_own_load_options(tmp_path: Path) -> None:
    """Kokoro's --compile is no part of a Magpie item's request (adding Kokoro items with it to a Magpie job does
    not speak the Magpie items again); --parallel, which sets how many items a worker speaks at once whatever their
    model, is refused where some model's family does not take it."""
    from ggtts.batch.items import Item
    from ggtts.batch.job import check_job
    from ggtts.batch.work import JobSettings

    kokoro, magpie = (str(skeleton_gguf(tmp_path / f"{arch}.gguf")) for arch in ("kokoro", "magpie"))
    k, m = Item(id="k", text="x", model=kokoro), Item(id="m", text="x", model=magpie)
    settings = JobSettings(out_dir=tmp_path / "out", load_options={"compile": True, "device": "cpu"})
    check_job(settings, items=[k, m])
    assert settings.request(k)["load"] == {"compile": True} and "load" not in settings.request(m)
    assert settings.key(m) == JobSettings(out_dir=tmp_path / "out").key(m)
    with pytest.raises(ggtts.InputError, match=r"--parallel applies to every item of a job, and kokoro does not"):
        check_job(dataclasses.replace(settings, load_options={"parallel": 2}), items=[k, m])
    check_job(dataclasses.replace(settings, load_options={"parallel": 2}), items=[m])


def test_a_batch_key_is_the_same_for_an_option_given_as_its_default(toy: Path, tmp_path: Path) -> None:
    """`--seed 0` is no `--seed`: an option given as the family's default changes no audio, nor the item's key (a
    job run again with it written out is not spoken again); another value, or another type, does."""
    from ggtts.batch.items import Item
    from ggtts.batch.work import JobSettings

    item = Item(id="a", text="one", model=str(toy))
    plain = JobSettings(out_dir=tmp_path / "out").key(item)
    assert JobSettings(out_dir=tmp_path / "out", options={"repeats": 1}).key(item) == plain
    assert JobSettings(out_dir=tmp_path / "out").key(dataclasses.replace(item, options={"repeats": 1})) == plain
    assert JobSettings(out_dir=tmp_path / "out", options={"repeats": 2}).key(item) != plain
    assert JobSettings(out_dir=tmp_path / "out", options={"repeats": 1.0}).key(item) == plain  # (read as 1)
    assert JobSettings(out_dir=tmp_path / "out", options={"repeats": True}).key(item) != plain  # (refused later)


def test_a_batch_checks_the_job_voice_and_speed_against_the_models_that_get_them(toy: Path, tmp_path: Path) -> None:
    """The job's voice and speed go to the items that give none of their own: checked against those items' models
    only. A job of the toy's items with the toy's voice is not refused for the default model (Kokoro), which no
    item speaks with; the toy's items without a voice of their own refuse a voice it does not have."""
    from ggtts.batch.items import Item
    from ggtts.batch.job import check_job
    from ggtts.batch.work import JobSettings

    toy_items = [Item(id="a", text="one", model=str(toy)), Item(id="b", text="two", model=str(toy))]
    check_job(JobSettings(out_dir=tmp_path / "out", voice="hum", speed=1.5), items=toy_items)
    with pytest.raises(ggtts.InputError, match=r"unknown voice 'hum'"):  # Kokoro's items get the job's voice
        check_job(JobSettings(out_dir=tmp_path / "out", voice="hum"), items=[*toy_items, Item(id="c", text="x")])
    with pytest.raises(
        ggtts.InputError, match=rf"^{re.escape(str(toy))} \(the model of item 'a'\): unknown voice 'jf_alpha'"
    ):
        check_job(JobSettings(out_dir=tmp_path / "out", voice="jf_alpha"), items=toy_items)
    own = [dataclasses.replace(item, voice="hum") for item in toy_items]
    check_job(JobSettings(out_dir=tmp_path / "out", voice="jf_alpha"), items=[*own, Item(id="c", text="x")])
    with pytest.raises(ggtts.InputError, match=r"speed 5.0 is out of range"):
        check_job(JobSettings(out_dir=tmp_path / "out", speed=5.0), items=toy_items)
    check_job(JobSettings(out_dir=tmp_path / "out", speed=5.0), items=[dataclasses.replace(i, speed=1.0) for i in own])


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        ((), r"a VoiceMix holds at least one voice"),
        ((("hum", 0.0),), r"a VoiceMix needs a voice of positive weight"),
        ((("hum", -1.0), ("hum", 2.0)), r"voice weight '-1.0' of 'hum' must be a finite positive number"),
        ((("hum", float("nan")),), r"voice weight 'nan' of 'hum' must be a finite positive number"),
        ((("hum", True),), r"voice weight 'True' of 'hum' must be a finite positive number"),
        (("hum",), r"a VoiceMix's parts are \(name, weight\) pairs, got 'hum'"),
    ],
)
def test_a_voice_mix_made_by_hand_is_checked_as_it_is_made(parts: Any, message: str) -> None:
    """An empty blend ended in min() of nothing deep inside Kokoro, a negative weight in NaN audio."""
    with pytest.raises(ggtts.InputError, match=message):
        VoiceMix(parts)


def test_audio_made_by_hand_is_checked_and_compares_without_error() -> None:
    """Audio is mono at a whole positive rate: stereo samples were interleaved into twice as many mono ones, a
    rate of 0 divided by zero. Two Audio compare as objects (comparing their numpy samples raised)."""
    one = Audio(np.zeros(4), 16000)
    assert one.duration == 4 / 16000 and Audio(np.zeros((1, 4)), np.int64(8000)).samples.shape == (4,)
    assert one != Audio(one.samples.copy(), 16000) and one == one and hash(one) == hash(one)
    for rate in (0, -1, 24000.0, "24000", True):
        with pytest.raises(ggtts.InputError, match="sample_rate must be a positive whole number of Hz"):
            Audio(np.zeros(4), rate)
    with pytest.raises(ggtts.InputError, match=r"Audio is mono: .* shape \(100, 2\)"):
        Audio(np.zeros((100, 2)), 16000)
    assert ggtts.WordTiming is not None and issubclass(ggtts.OutputError, OSError)


def test_a_path_of_the_wrong_type_is_one_input_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """load(5) and save(None) raised TypeErrors from os and pathlib; "~/x.wav" made a folder named "~"."""
    for wrong in (5, b"kokoro"):
        with pytest.raises(ggtts.InputError, match="a model is a GGUF file's path or a built-in name, got"):
            ggtts.load(wrong)  # type: ignore[arg-type]
    one = Audio(np.zeros(4), 16000)
    for wrong in (None, 3, b"b.wav"):
        with pytest.raises(ggtts.InputError, match=r"save takes a file's path \(str or pathlib.Path\), got"):
            one.save(wrong)  # type: ignore[arg-type]
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert one.save("~/x.wav") == tmp_path / "x.wav" and (tmp_path / "x.wav").is_file()
    assert not (tmp_path / "~").exists()


def test_numpy_seeds_bool_speeds_flags_and_none_load_options(toy: Path) -> None:
    """A numpy integer is a seed (it was refused); True is not a speed (it ran at 1.0); "yes" is not a flag (Kokoro's
    phonemes and progress took it); a load option given as None is not given (the loader refused it)."""
    from ggtts.families.base import check_seed
    from ggtts.families.kokoro import FAMILY as KOKORO

    assert check_seed(np.int64(3)) == 3 and type(check_seed(np.uint8(3))) is int
    with pytest.raises(ggtts.InputError, match=r"seed must be a whole number, got np\.True_"):
        check_seed(np.True_)
    model = ggtts.load(toy, loudness=None)
    with pytest.raises(ggtts.InputError, match="speed must be a number, got True"):
        model.synthesize("one", speed=True)  # type: ignore[arg-type]
    for flag in ("phonemes", "progress"):
        with pytest.raises(ggtts.InputError, match=f"{flag} must be true or false, got 'yes'"):
            KOKORO.check_options({flag: "yes"})
