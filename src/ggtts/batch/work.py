"""One item into one file: what every worker (this process, a local worker process, a Ray actor) runs.

A worker loads each model it is asked for once and keeps it. The audio is encoded in memory, then written under a
temporary name and renamed (:func:`ggtts.fsutil.atomic_output`), so a file under an item's name is always whole.
The result is the item's manifest record: ``done`` with the file's size and sha256, or ``failed`` with the reason.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ggtts.audio import FILE_FORMATS, encoded_rate
from ggtts.batch.items import Item
from ggtts.batch.manifest import DONE, FAILED
from ggtts.errors import GGTTSError, InputError

if TYPE_CHECKING:
    from ggtts.families import Family

LOAD_NOTED_S = 0.01  # a model lookup slower than this was a load, recorded as ``load_seconds``
FORMATS = tuple(suffix[1:] for suffix in FILE_FORMATS)  # wav, flac, ogg, opus, mp3


# JobSettings' fields besides out_dir: (name, the types it takes, what to call them)
_FIELD_TYPES: tuple[tuple[str, tuple[type, ...], str], ...] = (
    ("model", (str, type(None)), "a GGUF path, a built-in name or None"),
    ("voice", (str, type(None)), "a voice's name, a blend (str) or None"),
    ("speed", (int, float), "a number"),
    ("options", (dict,), "a dict of family options"),
    ("format", (str,), f"one of {', '.join(FORMATS)}"),
    ("float_wav", (bool,), "true or false"),
    ("load_options", (dict,), "a dict of load options"),
)


@dataclass(frozen=True)
class JobSettings:
    """What applies to every item unless the item says otherwise (model, voice, speed)."""

    out_dir: Path  # given as any folder's path (a str too), held as a Path
    model: str | None = None  # a GGUF path or built-in name; None: the default model
    voice: str | None = None
    speed: float = 1.0
    options: dict[str, Any] = field(default_factory=dict)  # family options (lang, seed, ...)
    format: str = "wav"
    float_wav: bool = False
    load_options: dict[str, Any] = field(default_factory=dict)  # device, precision, ... (ggtts.load's options)

    if TYPE_CHECKING:  # the dataclass's own __init__ as mypy is to read it: out_dir may be a str (__post_init__)

        def __init__(
            self, out_dir: str | os.PathLike[str], model: str | None = ..., voice: str | None = ...,
            speed: float = ..., options: dict[str, Any] = ..., format: str = ..., float_wav: bool = ...,
            load_options: dict[str, Any] = ...,
        ) -> None: ...  # fmt: skip

    def __post_init__(self) -> None:
        """Each field's type checked (they come from Python callers too): an InputError naming a wrong one."""
        if not isinstance(self.out_dir, str | os.PathLike):
            raise InputError(f"out_dir must be a folder's path, got {type(self.out_dir).__name__}")
        object.__setattr__(self, "out_dir", Path(self.out_dir))  # a str is welcome too
        if isinstance(self.model, os.PathLike):
            object.__setattr__(self, "model", os.fspath(self.model))
        for name, kind, what in _FIELD_TYPES:
            value = getattr(self, name)
            if not isinstance(value, kind) or (isinstance(value, bool) and bool not in kind):
                raise InputError(f"{name} must be {what}, got {type(value).__name__}")
        if self.float_wav and self.format != "wav":
            raise InputError(f"float_wav applies to WAV only, not {self.format}; leave it out or use format wav")

    def request(self, item: Item) -> dict[str, Any]:
        """Everything that decides an item's audio: equal requests give the same file. The load options are those
        its model's family takes (in a job of several families, another's option is not this item's)."""
        model = model_id(item.model if item.model is not None else self.model)
        load = {k: v for k, v in own_load_options(model, self.load_options).items() if k != "device"}
        return {
            "text": item.text,
            "model": model,
            "voice": item.voice if item.voice is not None else self.voice,
            "speed": item.speed if item.speed is not None else self.speed,
            "options": _without_defaults(model, {**self.options, **(item.options or {})}),
            "format": self.format,
            "float": self.float_wav,
            # what changes the audio beyond float noise (not the device), only where given: older jobs' keys hold
            **({"load": load} if load else {}),
        }

    @property
    def streams(self) -> int:
        """Items one worker speaks at once: the model's ``parallel`` load option (its utterances decode together:
        :mod:`ggtts.runtime.lanes`), else 1."""
        value = self.load_options.get("parallel", 1)
        return value if isinstance(value, int) and value > 1 else 1

    def key(self, item: Item) -> str:
        return request_key(self.request(item))

    def output(self, item: Item) -> str:
        """The item's file, relative to the output folder."""
        return f"{item.id}.{self.format}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["out_dir"] = str(self.out_dir)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> JobSettings:
        return cls(**{**d, "out_dir": Path(d["out_dir"])})


def request_key(request: dict[str, Any]) -> str:
    """The manifest's key of a request (:meth:`JobSettings.request`): equal requests, equal keys."""
    blob = json.dumps(request, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def model_id(name: str | None) -> str | None:
    """One name per model: None for the default, an absolute path for a file (however the path was written)."""
    from ggtts.api import DEFAULT_MODEL

    if name is None or name == DEFAULT_MODEL:
        return None
    path = Path(name).expanduser()
    return str(path.resolve()) if path.exists() else name


def own_load_options(model: str | None, options: dict[str, Any]) -> dict[str, Any]:
    """Those of the job's load options the model's family takes (a job's models may be of several families: each
    option was checked to be some model's, :func:`ggtts.batch.job.check_job`); all of them for a file that does not
    open (its load says why)."""
    family = _family_of(model)
    names = family.load_option_names() if family is not None else None
    return {key: value for key, value in options.items() if names is None or key in names}


def _without_defaults(model: str | None, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` less those given as the model's family's own default (``--seed 0`` is no ``--seed``): they
    change nothing, so they do not change the key."""
    family = _family_of(model)
    if family is None:
        return options
    defaults = {f.name: f.default for f in fields(family.options)}
    return {k: v for k, v in options.items() if not (k in defaults and _same(v, defaults[k]))}


def _same(value: Any, default: Any) -> bool:
    return value == default and isinstance(value, bool) == isinstance(default, bool)  # (True is not the seed 1)


@functools.lru_cache(maxsize=64)  # a job's few models, for each item's key: the family of a path is its file's
def _family_of(model: str | None) -> Family | None:
    from ggtts.api import resolve_model_path
    from ggtts.families import family_for
    from ggtts.gguf import GGUFFile

    try:
        return family_for(GGUFFile(resolve_model_path(model)))
    except GGTTSError:
        return None


def source_stamps(model: str | None, voice: str | None) -> dict[str, list[int]]:
    """The model's file and, where the voice is a file of its own (a cloned voice beside a Qwen3-TTS Base model),
    the voice's, each as [size, modification time in ns]: a model converted again to the same path, or a voice
    made again under the same name, changes them. Built-in names and files not on this machine are left out."""
    stamps: dict[str, list[int]] = {}
    if model is None or not Path(model).is_file():
        return stamps
    try:
        stamps["model"] = _stamp(Path(model))
        voice_file = _voice_file(model, voice) if voice is not None else None
        if voice_file is not None:
            stamps["voice"] = _stamp(voice_file)
    except OSError:  # gone meanwhile: its items say so when they are spoken
        return {}
    return stamps


def _stamp(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns]


def _voice_file(model: str, voice: str) -> Path | None:
    from ggtts.families import family_for
    from ggtts.gguf import GGUFFile

    try:
        gguf = GGUFFile(model)
        family = family_for(gguf)
        return family.voice_file(gguf, voice) if family.voice_file is not None else None
    except (GGTTSError, OSError):
        return None


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class ItemWorker:
    """Synthesizes items into files; loads each model once (a model that fails to load fails its items)."""

    def __init__(self, settings: JobSettings) -> None:
        self.settings = settings
        self._models: dict[str | None, Any] = {}
        self._loading = threading.Lock()  # items on several threads (``streams``) load a model once

    def model(self, name: str | None) -> Any:
        with self._loading:
            if name not in self._models:
                import ggtts

                try:
                    self._models[name] = ggtts.load(name, **own_load_options(name, self.settings.load_options))
                except GGTTSError as e:
                    self._models[name] = e
            model = self._models[name]
        if isinstance(model, GGTTSError):
            raise model
        return model

    def run(self, item: Item) -> dict[str, Any]:
        """The item spoken into its file; its manifest record (``failed`` with one line on any error)."""
        from ggtts.fsutil import atomic_output

        s = self.settings
        request = s.request(item)
        record: dict[str, Any] = {"id": item.id, "key": s.key(item), "worker": worker_name()}
        try:
            loading = time.perf_counter()
            model = self.model(request["model"])  # loaded on first use: its time is not the item's
            if time.perf_counter() - loading > LOAD_NOTED_S:
                record["load_seconds"] = _since(loading)
            start = time.perf_counter()
            audio = model.synthesize(item.text, voice=request["voice"], speed=request["speed"], **request["options"])
            data = audio.encode(s.format, float_wav=s.float_wav)
            output = s.output(item)
            with atomic_output(s.out_dir / output) as tmp:
                tmp.write_bytes(data)
        except Exception as e:  # bad input (a GGTTSError) or a bug: the item fails, the job goes on
            return record | failed_record(item.id, record["key"], error_message(e))
        return record | {
            "status": DONE,
            "output": output,
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "audio_seconds": round(audio.duration, 3),
            "sample_rate": encoded_rate(s.format, audio.sample_rate),  # the file's
            "seconds": _since(start),
            "time": _now(),
        }


def error_message(error: BaseException) -> str:
    """One line for a failed item: a GGTTSError's own sentence, anything else named as an internal error."""
    return str(error) if isinstance(error, GGTTSError) else f"internal error: {type(error).__name__}: {error}"


def failed_record(item_id: str, key: str, error: str) -> dict[str, Any]:
    """The manifest record of an item that has no audio, and why."""
    return {"id": item_id, "key": key, "status": FAILED, "error": error, "time": _now()}


def _since(start: float) -> float:
    return round(time.perf_counter() - start, 3)
