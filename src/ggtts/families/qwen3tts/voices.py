"""Cloned voices for Qwen3-TTS Base models: ``ggtts voice create REF.wav -m base.gguf -o NAME.gguf`` runs the
model's speaker encoder on the recording and stores the speaker embedding (an x-vector) in a small GGUF
(:class:`ggtts.gguf.keys.Qwen3TTSVoice`). With ``--text`` (what is said in the recording) it also stores the
recording's codes (the speech tokenizer's encoder): the voice is then an in-context prompt, upstream's ICL mode
(the recording's text and codes ahead of the new text, which clones more closely than the x-vector alone). A model
loads the voice files beside it (in its folder) whose embedding is as wide as its talker, by their names: ``-v
NAME`` on speak, serve and batch. A request names a voice; a path never reaches a model from a request.
"""

from __future__ import annotations

import io
import logging
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ggtts.errors import GGTTSError, GGUFError, InputError
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Qwen3TTSVoice as V
from ggtts.gguf.write import ModelWriter

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
log = logging.getLogger(__name__)
MIN_SECONDS, MAX_SECONDS = 1.0, 120.0  # a reference recording's length
MAX_FRAMES = int(MAX_SECONDS * 12.5)  # a recording's codes: 12.5 frames a second
MAX_STATE_DIMS = 5  # a stored decoder state's tensors: keys and values (2, B, H, T, D) at most
SILENCE = 1.0 / 32768


@dataclass(frozen=True)
class ClonedVoice:
    name: str
    embedding: torch.Tensor  # (width,)
    path: Path
    text: str | None = None
    codes: torch.Tensor | None = None  # (frames, codebooks), long: the in-context prompt's, with ``text``
    decoder_state: dict[str, torch.Tensor] | None = None  # the decoder after ``codes``, by layer name
    decoder_check: str = ""  # the hash of the decoder that made it

    @property
    def in_context(self) -> bool:
        return self.text is not None and self.codes is not None


def check_name(name: str) -> str:
    if not NAME.match(name):
        raise InputError(f"voice name {name!r}: use 1-64 letters, digits, '_', '-' or '.', starting with a letter or "
                         "digit")  # fmt: skip
    return name


def read_reference(source: str | os.PathLike[str] | bytes, rate: int) -> np.ndarray:
    """A reference recording (a path or a file's bytes: WAV, FLAC, OGG, MP3) as checked mono samples at ``rate``."""
    import soundfile

    from ggtts.audio import resample

    name = str(source) if not isinstance(source, bytes) else "the recording"
    if not isinstance(source, bytes) and not Path(source).is_file():
        raise InputError(f"{name}: a folder, not a recording" if Path(source).is_dir() else f"{name}: no such file")
    try:
        data, sr = soundfile.read(io.BytesIO(source) if isinstance(source, bytes) else str(source), dtype="float32",
                                  always_2d=True)  # fmt: skip
    except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError) as e:
        raise InputError(f"{name}: not an audio file that can be decoded ({e})") from None
    x = resample(data.mean(axis=1), int(sr), rate) if data.shape[0] else np.zeros(0, np.float32)
    seconds = x.size / rate
    if not MIN_SECONDS <= seconds <= MAX_SECONDS:
        raise InputError(f"{name}: {seconds:.2f} s of audio; a reference recording takes {MIN_SECONDS:g} to "
                         f"{MAX_SECONDS:g} s (a few seconds of one voice speaking)")  # fmt: skip
    if not np.isfinite(x).all():
        raise InputError(f"{name}: holds values that are not finite numbers")
    if float(np.abs(x).max()) <= SILENCE:
        raise InputError(f"{name}: the recording is silent")
    return np.clip(x, -1.0, 1.0).astype(np.float32)


def create_voice(model: str | os.PathLike[str], reference: str | os.PathLike[str], out: str | os.PathLike[str],
                 name: str | None = None, text: str | None = None, mmproj: str | None = None) -> Path:  # fmt: skip
    """The voice file of ``reference`` for the Base model ``model`` (its mmproj beside it, or ``mmproj``): its
    x-vector, and with ``text`` (what is said in the recording) its codes for the in-context prompt."""
    from ggtts.families.qwen3tts import find_mmproj, voice_file
    from ggtts.gguf.keys import Qwen3TTS as K
    from ggtts.models.qwen3tts.decoder import SpeechDecoder, fingerprint
    from ggtts.models.qwen3tts.encoder import SpeechEncoder
    from ggtts.models.qwen3tts.speaker import SAMPLE_RATE, SpeakerEncoder

    out = Path(out)
    if out.suffix != ".gguf":
        raise InputError(f"{out}: a voice file's name ends in .gguf (a model finds the voice files beside it by it)")
    name = check_name(name if name is not None else out.name.removesuffix(".gguf"))
    _check_replaceable(out)
    talker = GGUFFile(model)
    if talker.architecture != K.ARCH:
        raise GGUFError(f"{talker.path}: not a Qwen3-TTS model (architecture '{talker.architecture}')")
    width = talker.get_int(K.EMBEDDING_LENGTH)
    if out.parent.resolve() == Path(talker.path).parent.resolve():  # beside the model (its folder: a link's own)
        taken = voice_file(talker, name)
        if taken is not None and taken.resolve() != out.resolve():  # (writing over that very file is fine)
            raise InputError(
                f"a voice named {name!r} is already beside the model ({taken}), and would be spoken instead of "
                f"this one: choose another --name, or write over that file (-o {taken})"
            )
    found = Path(mmproj) if mmproj is not None else find_mmproj(Path(talker.path))
    if found is None:
        raise InputError(f"{talker.path}: its mmproj file is not beside it; name it with --mmproj")
    text = None if text is None else text.strip()
    if text is not None and not any(ch.isalnum() for ch in text):
        raise InputError("--text: say what is said in the recording (it has no words)")
    projector = GGUFFile(found)
    encoder = SpeakerEncoder.from_gguf(projector)
    speech = SpeechEncoder.from_gguf(projector) if text else None  # before the work, so a missing one fails fast
    samples = read_reference(reference, SAMPLE_RATE)
    embedding = encoder.embed(torch.from_numpy(samples))
    if embedding.shape[0] != width:
        raise GGUFError(f"{found}: speaker embeddings {embedding.shape[0]} wide for a talker {width} wide")
    writer = ModelWriter(out, V.ARCH)
    writer.meta.add_name(name)
    writer.add(V.NAME, name)
    writer.add(V.WIDTH, int(embedding.shape[0]))
    writer.add(V.MODEL, Path(talker.path).name)
    writer.add(V.SOURCE, Path(reference).name if not isinstance(reference, bytes) else "")
    writer.add(V.SECONDS, round(samples.size / SAMPLE_RATE, 3))
    writer.add_tensor(V.EMBEDDING, embedding.float())
    if speech is not None and text:
        codes = speech.encode(torch.from_numpy(samples))
        writer.add(V.TEXT, text)
        writer.add_tensor(V.CODES, codes.float())
        # the decoder primed with the recording, so speaking need not decode it again (a cache)
        stream = SpeechDecoder.from_gguf(projector).stream()
        stream.push(codes.T.unsqueeze(0))
        state = stream.saved()
        writer.add(V.DECODER_CHECK, fingerprint(projector))
        writer.add(V.DECODER_SHAPES, [f"{n}={','.join(str(d) for d in t.shape)}" for n, t in state.items()])
        for n, t in state.items():
            writer.add_tensor(f"{V.DECODER_STATE}.{n}", t.reshape(-1))
    return writer.write()


def _check_replaceable(out: Path) -> None:
    """``out`` is new, or a voice file to write over; never another file (the model, its mmproj: ``-o`` naming one
    by mistake would destroy it)."""
    if not out.exists() and not out.is_symlink():
        return
    try:
        architecture = GGUFFile(out).architecture
    except (GGTTSError, OSError):
        architecture = None
    if architecture != V.ARCH:
        what = f"a GGUF of '{architecture}'" if architecture else "not a GGUF file"
        raise InputError(f"{out} exists and is not a voice file ({what}); voice create writes over voice files only: "
                         "choose another -o")  # fmt: skip


def read_voice(path: Path) -> ClonedVoice:
    g = GGUFFile(path)
    if g.architecture != V.ARCH:
        raise GGUFError(f"{path}: not a cloned voice (architecture '{g.architecture}')")
    name = g.get_str(V.NAME)
    if not NAME.match(name):
        raise GGUFError(f"{path}: the voice's name {name!r} is not a voice name")
    embedding = g.tensor(V.EMBEDDING)
    if embedding.dim() != 1 or embedding.shape[0] != g.get_int(V.WIDTH) or not torch.isfinite(embedding).all():
        raise GGUFError(f"{path}: the speaker embedding is not {g.get_int(V.WIDTH)} finite numbers")
    text = g.get_str(V.TEXT, "") or None
    codes = None
    if V.CODES in g:
        stored = g.tensor(V.CODES)
        sized = stored.dim() == 2 and 0 < stored.shape[0] <= MAX_FRAMES
        whole = bool(torch.isfinite(stored).all()) and bool((stored == stored.round()).all())
        if text is None or not sized or not whole or (stored < 0).any() or (stored >= 2**24).any():
            raise GGUFError(f"{path}: the recording's codes are not 1 to {MAX_FRAMES} frames of whole non-negative "
                            "numbers with its text")  # fmt: skip
        codes = stored.long()
    state = _decoder_state(g) if codes is not None else None
    return ClonedVoice(name, embedding, Path(path), text, codes, state, g.get_str(V.DECODER_CHECK, ""))


def _decoder_state(g: GGUFFile) -> dict[str, torch.Tensor] | None:
    """The stored decoder state, or None where there is none or it does not add up (it is a cache)."""
    state = {}
    try:
        for entry in g.get_list(V.DECODER_SHAPES, []):
            name, _, dims = str(entry).partition("=")
            shape = [int(d) for d in dims.split(",")]
            if not shape or min(shape) < 0 or len(shape) > MAX_STATE_DIMS:  # a spill of 0 samples is one
                return None
            flat = g.tensor(f"{V.DECODER_STATE}.{name}")
            if flat.dim() != 1 or flat.numel() != math.prod(shape) or not torch.isfinite(flat).all():
                return None
            state[name] = flat.reshape(shape)
    except (GGTTSError, KeyError, ValueError, RuntimeError):
        return None
    return state or None


def voices_beside(model: Path, width: int) -> tuple[dict[str, ClonedVoice], dict[str, str]]:
    """The cloned voices in the model's folder made for a talker ``width`` wide, by name (a name given twice keeps
    the first file's, in name order; files that are not voices are passed over), and the damaged ones: a voice
    file whose metadata reads but whose voice does not, by the name it gives, with the problem (logged)."""
    found: dict[str, ClonedVoice] = {}
    damaged: dict[str, str] = {}
    for p in sorted(Path(model).parent.glob("*.gguf")):
        try:
            g = GGUFFile(p)
            if g.architecture != V.ARCH or g.get_int(V.WIDTH, -1) != width:
                continue
            name = g.get_str(V.NAME, "")
        except (GGTTSError, OSError):
            continue
        try:
            voice = read_voice(p)
        except (GGTTSError, OSError) as e:
            log.warning("the voice file %s (%r) is damaged and is not offered: %s", p, name, e)
            damaged.setdefault(name, str(e))
            continue
        found.setdefault(voice.name, voice)
    return found, {name: problem for name, problem in damaged.items() if name not in found}


def voice_files_beside(model: Path, width: int) -> list[tuple[Path, str]]:
    """The voice files in the model's folder made for a talker ``width`` wide, with their names, in name order;
    from metadata only."""
    files = []
    for p in sorted(Path(model).parent.glob("*.gguf")):
        try:
            g = GGUFFile(p)
            if g.architecture == V.ARCH and g.get_int(V.WIDTH, -1) == width and NAME.match(g.get_str(V.NAME, "")):
                files.append((p, g.get_str(V.NAME)))
        except (GGTTSError, OSError):
            continue
    return files


def voice_names_beside(model: Path, width: int) -> list[str]:
    """The names of :func:`voices_beside`, from metadata only."""
    return list(dict.fromkeys(name for _, name in voice_files_beside(model, width)))
