"""What every model family provides: the ``TTSModel`` interface its pipeline implements, and its ``Family``
record (name, the GGUF architectures it claims and how it recognises its files, companion files, converters,
typed options, voices, capabilities). The registry, ``ggtts convert``, the CLI's flags, ``ggtts info`` and the
server are all built from the list of records (:mod:`ggtts.families`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import itertools
import math
import os
import re
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, Self, TypeVar

import numpy as np

from ggtts.audio import Audio
from ggtts.errors import InputError
from ggtts.ops.precision import DEFAULT_PRECISION, PRECISIONS, check_name, check_precision
from ggtts.runtime.device import check_device_name

if TYPE_CHECKING:
    from pathlib import Path

    from ggtts.gguf import GGUFFile
    from ggtts.runtime.lanes import LaneLoop
    from ggtts.text.lexicon import Lexicon
    from ggtts.text.normalize import Normalization

MIN_SPEED = 0.25  # OpenAI's /v1/audio/speech range (and Kokoro-FastAPI's)
MAX_SPEED = 4.0
VOICE_SEPARATOR = ","  # "a,b" blends voices
WEIGHT_SEPARATOR = ":"  # "a:0.7,b:0.3" gives them weights
MAX_SEED = 2**64 - 1  # torch.Generator.manual_seed takes 0 .. 2**64 - 1 (a negative one wraps around)
_SURROGATE = re.compile("[\ud800-\udfff]")  # never valid alone; Python decodes undecodable argv bytes to these


# ---- checks every pipeline shares ------------------------------------------------------------------------------
def check_speed(speed: float | str, limits: tuple[float, float] = (MIN_SPEED, MAX_SPEED)) -> float:
    if isinstance(speed, bool):
        raise InputError(f"speed must be a number, got {speed!r}")
    try:
        speed = float(speed)
    except (TypeError, ValueError):
        raise InputError(f"speed must be a number, got {speed!r}") from None
    low, high = limits
    if not low <= speed <= high:
        raise InputError(f"speed {speed} is out of range; use {low} to {high}")
    return speed


def check_unicode(text: str) -> str:
    """``text``, or an InputError naming where it holds a lone surrogate (U+D800..U+DFFF): such a string is not
    Unicode text, and cannot be encoded; it is what undecodable bytes become (argv's surrogateescape, say)."""
    found = _SURROGATE.search(text)
    if found is not None:
        raise InputError(
            f"the text is not valid Unicode text: it holds U+{ord(found.group()):04X} (a lone surrogate) at character "
            f"offset {found.start()}; invalid UTF-8 in the input?"
        )
    return text


class NothingToSay(InputError):
    """Text with no word to speak (only punctuation, symbols or characters the frontend cannot read)."""

    PREVIEW_CHARS = 40

    def __init__(self, text: str) -> None:
        shown = text.strip()
        if len(shown) > self.PREVIEW_CHARS:
            shown = shown[: self.PREVIEW_CHARS] + "..."
        super().__init__(f"the text has nothing to say: no word in {shown!r} can be read aloud")


def check_text(text: str, max_chars: int) -> str:
    if not isinstance(text, str):
        raise InputError(f"text must be a string, got {type(text).__name__}")
    if not text.strip():
        raise InputError("the text is empty")
    if len(text) > max_chars:
        raise InputError(f"the text is {len(text)} characters long; the limit is {max_chars}")
    return check_unicode(text)


def check_seed(seed: object) -> int:
    """``seed`` if it is a whole number a random generator takes (0 to :data:`MAX_SEED`); else an InputError."""
    if isinstance(seed, bool | np.bool_) or not isinstance(seed, int | np.integer):
        raise InputError(f"seed must be a whole number, got {seed!r}")
    if not 0 <= seed <= MAX_SEED:
        raise InputError(f"seed must be between 0 and {MAX_SEED}, got {seed}")
    return int(seed)  # (numpy's integers too)


def check_number(name: str, low: float, high: float = math.inf, whole: bool = False) -> Callable[[object], int | float]:
    """The ``check`` of a numeric option ``name``: a finite number (a whole one if ``whole``) from ``low`` to
    ``high``, else an InputError saying so."""

    def check(value: object) -> int | float:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if ok:
            number = float(value)  # type: ignore[arg-type]
            ok = low <= number <= high and not (whole and not number.is_integer())
        if not ok:
            kind = "a whole number" if whole else "a finite number"
            span = f"of at least {low:g}" if high == math.inf else f"from {low:g} to {high:g}"
            raise InputError(f"{name} must be {kind} {span}, got {value!r}")
        return int(value) if whole else value  # type: ignore[call-overload,return-value]

    check.converts = True  # type: ignore[attr-defined]  # TTSModel.request keeps what it returns (4.0 -> 4)
    return check


def check_flag(name: str) -> Callable[[object], bool]:
    """The ``check`` of a true-or-false option ``name``: the value if it is a bool, else an InputError."""

    def check(value: object) -> bool:
        if not isinstance(value, bool):
            raise InputError(f"{name} must be true or false, got {value!r}")
        return value

    return check


def check_path(name: str) -> Callable[[object], object]:
    """The ``check`` of an option naming a file (a companion GGUF, a speaker profile): the value if it is a string
    or a path, else an InputError saying so."""

    def check(value: object) -> object:
        if not isinstance(value, str | os.PathLike):
            raise InputError(f"{name} must be a file's path, got {value!r}")
        return value

    return check


# ---- voices ----------------------------------------------------------------------------------------------------
class UnknownVoiceError(InputError):
    def __init__(self, name: str, voices: Sequence[str]) -> None:
        self.name, self.voices = name, list(voices)
        choices = f"choose one of {', '.join(voices)}" if voices else "this model has no voices; leave voice out"
        super().__init__(f"unknown voice '{name}'; {choices}")


class VoiceBlendError(InputError):
    """A blend of voices asked of a model whose family cannot blend them."""


class VoiceWeightError(InputError):
    def __init__(self, name: str, weight: str, number: bool, example: str = "'a:0.6,b:0.4'") -> None:
        self.name, self.weight = name, weight
        problem = f"must be a finite positive number, as in {example}" if number else "is not a number"
        super().__init__(f"voice weight '{weight}' of '{name}' {problem}")


@dataclass(frozen=True)
class VoiceMix:
    """A voice as asked for: one name, or a blend of the model's voices with weights that sum to 1."""

    parts: tuple[tuple[str, float], ...]

    def __post_init__(self) -> None:
        """At least one voice, each a name with a finite weight not below 0, one above (it may be made by hand)."""
        if not isinstance(self.parts, tuple) or not self.parts:
            raise InputError("a VoiceMix holds at least one voice: VoiceMix((('name', 1.0),))")
        for part in self.parts:
            if not (isinstance(part, tuple) and len(part) == 2 and isinstance(part[0], str)):
                raise InputError(f"a VoiceMix's parts are (name, weight) pairs, got {part!r}")
            name, weight = part
            if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 <= weight < math.inf:
                raise VoiceWeightError(name, repr(weight), number=True, example="VoiceMix((('a', 0.6), ('b', 0.4)))")
        if not any(weight > 0 for _, weight in self.parts):  # (one share may underflow to 0: "a:1e308,b:1e-300")
            raise InputError("a VoiceMix needs a voice of positive weight")

    @property
    def single(self) -> str | None:
        return self.parts[0][0] if len(self.parts) == 1 else None

    def __str__(self) -> str:
        if self.single is not None:
            return self.single
        return VOICE_SEPARATOR.join(f"{name}{WEIGHT_SEPARATOR}{weight:g}" for name, weight in self.parts)


def parse_voice(spec: str, voices: Sequence[str]) -> VoiceMix:
    """``"name"``, ``"a,b"`` (equal weights) or ``"a:0.6,b:0.4"`` -> a ``VoiceMix`` of known names. Kokoro-FastAPI's
    form is read too: ``"a+b"`` (equal weights), ``"a(2)+b(1)"`` (two thirds of a); its subtraction is refused.

    Every name must be one of ``voices``, so nothing else from a request (a file path, say) ever reaches a model
    as a voice. Weights are finite and positive; any such ones blend, however large or small (``"a:1e308,b:1e308"``
    is an equal blend). Raises :class:`UnknownVoiceError` or :class:`VoiceWeightError`.
    """
    names: list[str] = []
    weights: list[float] = []
    plus_form = _is_plus_form(spec, voices)
    for name, weight in _plus_terms(spec) if plus_form else _comma_terms(spec):
        if name not in voices:
            _refuse_subtraction(name, voices)
            raise UnknownVoiceError(name, voices)
        value = 1.0
        if weight is not None:
            try:
                value = float(weight)
            except ValueError:
                raise VoiceWeightError(name, weight, number=False) from None
            if not (math.isfinite(value) and value > 0):
                raise VoiceWeightError(
                    name, weight, number=True, example="'a(2)+b(1)'" if plus_form else "'a:0.6,b:0.4'"
                )
        names.append(name)
        weights.append(value)
    largest = max(weights)
    scaled = [w / largest for w in weights]  # in (0, 1]: the sum cannot overflow, and is at least 1
    total = sum(scaled)
    return VoiceMix(tuple((n, w / total) for n, w in zip(names, scaled, strict=True)))


_PLUS_TERM = re.compile(r"(?P<name>[^()]*?)\s*(?:\((?P<weight>[^()]*)\))?")


def _is_plus_form(spec: str, voices: Sequence[str]) -> bool:
    """Kokoro-FastAPI's ``a+b`` / ``a(2)+b(1)``: a spec that is no voice's name and has no ``,`` or ``:``."""
    if spec.strip() in voices or VOICE_SEPARATOR in spec or WEIGHT_SEPARATOR in spec:
        return False
    return "+" in spec or "(" in spec


def _plus_terms(spec: str) -> Iterator[tuple[str, str | None]]:
    for part in spec.split("+"):
        found = _PLUS_TERM.fullmatch(part.strip())
        if found is None:  # parentheses that are not one weight at the end: the part as a name, unknown
            yield part.strip(), None
        else:
            weight = found["weight"]
            yield found["name"], None if weight is None else weight.strip()


def _comma_terms(spec: str) -> Iterator[tuple[str, str | None]]:
    for part in spec.split(VOICE_SEPARATOR):
        name, mark, weight = (s.strip() for s in part.partition(WEIGHT_SEPARATOR))
        yield name, weight if mark else None


def _refuse_subtraction(name: str, voices: Sequence[str]) -> None:
    """Kokoro-FastAPI's ``a-b`` (one voice less another): one clear error where every side is a voice."""
    sides = [_PLUS_TERM.fullmatch(side.strip()) for side in name.split("-")]
    if len(sides) > 1 and all(side is not None and side["name"] in voices for side in sides):
        raise VoiceBlendError(
            f"voice '{name}' subtracts voices, which ggtts does not do; blend them: 'a+b', 'a(2)+b(1)'"
        )


# ---- the model interface ---------------------------------------------------------------------------------------
Opts = TypeVar("Opts")


@dataclass(frozen=True)
class Request(Generic[Opts]):
    """One synthesis, checked, as a family's :meth:`TTSModel.run` receives it: the text (within the record's
    limit), the voice resolved once (``None``: the model has no voices), the speed within the record's range, and
    the family's frozen per-call options (each one not given at its dataclass default). ``streaming``: the audio
    is wanted chunk by chunk (``stream``), or whole (``synthesize``)."""

    text: str
    voice: VoiceMix | None
    speed: float
    options: Opts
    streaming: bool = True


class AudioStream(Iterator[Audio], Protocol):
    """What :meth:`TTSModel.stream` returns: the utterance's chunks, each made as it is asked for. ``close()``
    gives up the rest (none of it is made): a generator's ``close``, or a parallel model's lanes letting the
    utterance go (:class:`~ggtts.runtime.lanes.LaneLoop`)."""

    def close(self) -> None: ...


class TTSModel(ABC):
    """A loaded text-to-speech model.

    ``synthesize`` returns the whole utterance; ``stream`` yields chunks as they are ready, which concatenate to
    the same audio (closing the stream gives up the rest: :class:`AudioStream`). ``family`` is the record of the
    family the model belongs to.

    Both are one template: :meth:`request` checks the text, resolves the voice, checks the speed against the
    record and builds the family's options dataclass, before any work; the family's :meth:`run` then makes the
    audio. A family's pipeline implements ``run`` (and ``from_gguf`` and ``voices``), nothing else; its ``run``
    reads the text through :meth:`said` (the ``lexicon`` load option) or :meth:`said_plainly` (and its markup
    taken away), or applies the lexicon where it tracks words.
    """

    family: ClassVar[Family | None] = None
    sample_rate: int
    lanes: LaneLoop[Any] | None = None  # utterances decoded together (the ``parallel`` load option): use_lanes
    lexicon: Lexicon | None = None  # the user's own pronunciations (the ``lexicon`` load option), read before all

    def said(self, text: str) -> str:
        """``text`` with the words of the model's lexicon said as it says (for a family whose words are not timed:
        those that are apply it where they track each word's span)."""
        return text if self.lexicon is None else self.lexicon.said(text)

    def said_plainly(self, text: str, normalization: Normalization | bool) -> str:
        """``text`` as a family that reads it as written takes it: :meth:`said`, then its Markdown, HTML and
        decorative emoji taken away unless ``normalization`` (its ``normalization`` option) says not to
        (:func:`ggtts.text.normalize.unmarked`)."""
        from ggtts.text.normalize import unmarked

        return unmarked(self.said(text), normalization)

    @classmethod
    @abstractmethod
    def from_gguf(cls, gguf: GGUFFile, device: str = "cpu", **options: Any) -> TTSModel: ...

    def use_lanes(self, loop: LaneLoop[Any] | None) -> None:
        """Decode requests in ``loop`` (its thread starts at the first); the loop ends with the model, closed
        (:meth:`close`) or dropped (collected), so that its thread lets go of the weights."""
        self.lanes = loop
        if loop is not None:
            weakref.finalize(self, loop.close, wait=False).atexit = False  # (at exit the lanes end their own way)

    def close(self) -> None:
        """Let go now of what the model holds besides its memory: the thread of its lanes (``parallel``), which
        takes no more requests. A model used in ``with`` is closed at the block's end; one dropped is closed as it
        is collected."""
        if self.lanes is not None:
            self.lanes.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def family_name(self) -> str:
        """The public name: the family's (``kokoro``, ``outetts``)."""
        return self.family.name if self.family is not None else type(self).__name__

    @property
    def architecture(self) -> str:
        """The GGUF architecture of the file it loads (``kokoro``, ``qwen2``)."""
        return self.family.architectures[0] if self.family is not None else type(self).__name__

    @property
    @abstractmethod
    def voices(self) -> list[str]: ...

    @property
    def default_voice(self) -> str | None:
        voices = self.voices
        return voices[0] if voices else None

    def voice_description(self, voice: str) -> str:
        """``voice`` with what its name tells, as "jf_alpha (Japanese, female)"; the name alone where it tells
        nothing."""
        traits = self.family.voice_traits(voice) if self.family is not None else {}
        said = ", ".join(traits[k] for k in ("language", "gender") if k in traits)
        return f"{voice} ({said})" if said else voice

    def voice_languages(self, voice: str) -> list[str]:
        """The languages ``voice`` speaks with no option set, as POSIX-style codes ("en_US", "ja"), where the model
        knows them: its family's voice names, or else what the family speaks (``Capabilities.speaks``); empty when
        neither says. Wyoming advertises them (Home Assistant lists a voice only under its languages)."""
        if self.family is None:
            return []
        code = self.family.voice_traits(voice).get("language_code")
        return [code] if code else list(self.family.capabilities.speaks)

    def resolve_voice(self, voice: str | None) -> VoiceMix | None:
        """The voice asked for, checked against the model's voices (``None``: the default voice); a blend only
        where the family blends voices."""
        if voice is None:
            default = self.default_voice
            return None if default is None else VoiceMix(((default, 1.0),))
        mix = parse_voice(voice, self.voices)
        if self.family is not None:
            self.family.check_blend(mix, self.voices)
        return mix

    def request(
        self, text: str, voice: str | VoiceMix | None = None, speed: float | str = 1.0, *, streaming: bool = True,
        text_optional: bool = False, **options: Any,
    ) -> Request[Any]:  # fmt: skip
        """The checked :class:`Request` (InputError at the first problem, before any work): an option the family
        does not take (or takes only when streaming), a bad value, text over the limit, a voice not the model's.
        ``text_optional``: empty text is accepted (a request whose question is audio)."""
        family = self.family
        if family is None:
            raise TypeError(f"{type(self).__name__} has no family record: it implements stream itself")
        family.check_options(options, family.call_option_names(streaming))
        if not (text_optional and isinstance(text, str) and not text.strip()):
            text = check_text(text, family.capabilities.max_input_chars)
        checked_speed = family.check_speed(speed)
        if voice is not None and not isinstance(voice, str | VoiceMix):
            raise InputError(f"voice must be a voice's name, got {voice!r}")
        mix = self._check_mix(voice) if isinstance(voice, VoiceMix) else self.resolve_voice(voice)
        values: dict[str, Any] = {}
        for f in dataclasses.fields(family.options):
            value = options.get(f.name)
            if value is not None:
                check = f.metadata.get("check")
                values[f.name] = check(value) if check is not None and getattr(check, "converts", False) else value
        return Request(text, mix, checked_speed, family.options(**values), streaming)

    def _check_mix(self, mix: VoiceMix) -> VoiceMix:
        """A voice resolved elsewhere (the server's), checked again: the model's names, a blend only where the
        family blends."""
        for name, _ in mix.parts:
            if name not in self.voices:
                raise UnknownVoiceError(name, self.voices)
        if self.family is not None:
            self.family.check_blend(mix, self.voices)
        return mix

    def stream(self, text: str, voice: str | VoiceMix | None = None, speed: float = 1.0, **options: Any) -> AudioStream:
        """Audio chunk by chunk; the request is checked before the first chunk is asked for. ``close()`` the stream
        to stop early: what is not made yet never is."""
        return self.run(self.request(text, voice, speed, streaming=True, **options))

    @property
    def parallel_streams(self) -> int:
        """How many utterances this model decodes at once when asked from several threads (1: one at a time; see
        OuteTTS's ``parallel`` load option and :mod:`ggtts.runtime.lanes`)."""
        return 1

    def run(self, request: Request[Any]) -> AudioStream:
        """The family's synthesis of a checked request: its audio, chunk by chunk (whole when not
        ``request.streaming``: one chunk or more, concatenated by :meth:`synthesize`)."""
        raise NotImplementedError(f"{type(self).__name__} implements neither run nor stream")

    def chat(self, text: str = "", *, audio: Any = None, voice: str | VoiceMix | None = None, speak: bool = True,
             **options: Any) -> Any:  # fmt: skip
        """Answer a question (text, audio or both) and speak the answer: families with the ``chat`` capability
        (Qwen3-Omni) implement it; the others speak text as given."""
        raise InputError(f"{self.family_name} speaks text; it does not answer questions (use synthesize or stream)")

    def warm_up(self) -> None:
        """Load now what the first request would otherwise load on its own time (text frontends, dictionaries);
        a server calls it at start. Nothing by default."""
        return None

    def synthesize(self, text: str, voice: str | VoiceMix | None = None, speed: float = 1.0, **options: Any) -> Audio:
        if self.family is None:
            parts = list(self.stream(text, voice=voice, speed=speed, **options))
        else:
            parts = list(self.run(self.request(text, voice, speed, streaming=False, **options)))
        if not parts:
            return Audio(samples=np.zeros(0, dtype=np.float32), sample_rate=self.sample_rate)
        return Audio.concatenate(parts)

    def info(self) -> dict[str, Any]:
        return {
            "family": self.family_name,
            "architecture": self.architecture,
            "sample_rate": self.sample_rate,
            "voices": self.voices,
        }


# ---- the family record -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Capabilities:
    speed: tuple[float, float] = (MIN_SPEED, MAX_SPEED)
    blending: bool = False  # voices can be mixed ("a:0.6,b:0.4")
    phonemes: bool = False  # takes phonemes as well as text
    languages: tuple[str, ...] = ()  # codes the ``lang`` option takes (empty: no such option)
    # the languages its voices speak with no option set ("en", "ja"), where their names do not say (Wyoming's)
    speaks: tuple[str, ...] = ()
    max_input_chars: int = 100_000
    streaming: bool = True
    timestamps: bool = False  # its audio carries word timestamps (``Audio.words``)
    chat: bool = False  # answers a question (text or audio) and speaks the answer: ``model.chat``, ``ggtts chat``
    # text that arrives in pieces (the live socket, Wyoming's streaming synthesis): the fewest words a first stretch
    # cut at a clause holds (ggtts.text.incremental); 1 where the model's own stream speaks a first clause alone
    first_clause_words: int = 3


@dataclass(frozen=True)
class Companion:
    """A second file a family's model needs (OuteTTS's vocoder), found beside it or named by ``option``."""

    option: str  # the load option (and CLI flag) that names it
    architecture: str  # its GGUF architecture
    help: str
    # which files of that architecture it is, where several families share one (llama.cpp's "clip" mmproj files)
    matches: Callable[[GGUFFile], bool] | None = None

    def is_for(self, gguf: GGUFFile) -> bool:
        return gguf.architecture == self.architecture and (self.matches is None or self.matches(gguf))


def option(
    default: Any,
    help: str,
    *,
    flag: str | None = None,
    check: Callable[[Any], Any] | None = None,
    choices: Sequence[str] | None = None,
    streaming_only: bool = False,
    server: bool = True,
) -> Any:
    """A field of a family's options dataclass (per call, or load options); ``flag`` puts it on the command lines
    (``ggtts speak``, and for load options ``serve``, ``batch``, ``eval``); ``check`` raises an InputError for a bad
    value (:meth:`Family.check_options` and the command lines run it before any work); ``choices`` lists the
    values a flag takes; ``streaming_only``: a per-call option only ``stream`` takes (how it windows its chunks);
    ``server=False``: a per-call option the server's requests do not take (a progress bar, a file chosen at load)."""
    metadata = {"help": help, "flag": flag, "check": check, "choices": choices, "streaming_only": streaming_only,
                "server": server}  # fmt: skip
    return field(default=default, metadata=metadata)


def text_normalization_option() -> Any:
    """The ``normalization`` option of a family that reads English text through :mod:`ggtts.text.normalize` (and
    takes the markup of other languages' text away, :mod:`ggtts.text.markup`): on by default, ``--no-normalize``,
    or (API) the switches of a ``Normalization``."""
    return option(
        True,
        "read numbers, dates, units, addresses and symbols in English text as words, and take Markdown, HTML and "
        "decorative emoji away in any language, before G2P (default); --no-normalize: the text as written (the API "
        "also takes a ggtts.text.normalize.Normalization)",
        flag="--normalize",
        check=_normalization_switches,
    )


def markup_option(where: str = "") -> Any:
    """The ``normalization`` option of a family that reads its text as written but for its markup
    (:mod:`ggtts.text.markup`): a ``Normalization``'s ``markdown`` switch is the one that applies."""
    return option(
        True,
        f"take Markdown, HTML and decorative emoji away before speaking{where} (default); --no-normalize: the text "
        "as written (the API also takes a ggtts.text.normalize.Normalization: its markdown switch)",
        flag="--normalize",
        check=_normalization_switches,
    )


def _normalization_switches(value: Any) -> Any:
    from ggtts.text.normalize import normalization_switches

    return normalization_switches(value)


def precision_load_option(what: str) -> Any:
    """The ``precision`` load option of a family that can run ``what`` in bfloat16."""
    return option(
        DEFAULT_PRECISION,
        f"bfloat16 runs {what} in bfloat16 where the device has it natively; default float32",
        flag="--precision",
        check=check_name,
        choices=PRECISIONS,
    )


def read_first(items: Iterator[Any], n: int) -> None:
    """The first ``n`` of a stream's ``items``, then the stream closed (the rest never made): a warm-up's run."""
    try:
        for _ in itertools.islice(items, n):
            pass
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()


MAX_PARALLEL = 64  # utterances one copy of a model decodes together (the ``parallel`` load option)


def parallel_load_option(what: str, devices: str = "CPU and CUDA") -> Any:
    """The ``parallel`` load option of a family whose utterances can decode together (continuous batching:
    :mod:`ggtts.runtime.lanes`); ``what``: the steps they share; ``devices``: where."""
    return option(
        1,
        f"decode up to N utterances together (continuous batching: streams asked at once share each step of {what}; "
        f"{devices}); default 1, each alone",
        flag="--parallel",
        check=check_number("parallel", 1, MAX_PARALLEL, whole=True),
    )


def _lexicon(value: Any) -> Any:
    """The ``lexicon`` load option, read (so a bad file is refused before any load)."""
    from ggtts.text.lexicon import as_lexicon

    as_lexicon(value)
    return value


@dataclass(frozen=True)
class LoadOptions:
    """What every family's loader takes; a family with more subclasses it (fields made with :func:`option`)."""

    device: str = option(
        "auto",
        "torch device: auto (CUDA where this torch has it, else the CPU; the default), cpu, cuda, cuda:N",
        flag="--device",
        check=check_device_name,
    )
    lexicon: Any = option(  # noqa: RUF009 (a field; frozen)
        None,
        "a pronunciation lexicon: a file of lines 'written = said' (or a JSON object; the API also takes a dict), "
        "each written word said as spelled out there, in every language",
        flag="--lexicon",
        check=_lexicon,
    )


def check_option_values(options_type: type, options: Mapping[str, Any]) -> None:
    """Run the ``check`` of each field of ``options_type`` given (not ``None``) in ``options``."""
    for f in dataclasses.fields(options_type):
        check = f.metadata.get("check")
        if check is not None and options.get(f.name) is not None:
            check(options[f.name])


def find_beside(model_path: Path, architecture: str, matches: Callable[[GGUFFile], bool] | None = None) -> Path | None:
    """The only GGUF of ``architecture`` (and, where given, that ``matches``) in the model's folder, if there is
    exactly one (a companion file)."""
    found = files_beside(model_path, architecture, matches)
    return found[0] if len(found) == 1 else None


def files_beside(model_path: Path, architecture: str, matches: Callable[[GGUFFile], bool] | None = None) -> list[Path]:
    """Every GGUF of ``architecture`` (that ``matches``) in the model's folder but the model, in name order."""
    from ggtts.errors import GGTTSError
    from ggtts.gguf import GGUFFile

    found = []
    for p in sorted(model_path.parent.glob("*.gguf")):
        if p == model_path:
            continue
        try:
            g = GGUFFile(p)
            if g.architecture == architecture and (matches is None or matches(g)):
                found.append(p)
        except GGTTSError:
            continue
    return found


def not_found_beside(model_path: Path, architecture: str, matches: Callable[[GGUFFile], bool] | None = None) -> str:
    """Why :func:`find_beside` found no companion, to end a message: several beside the model (which?), or none."""
    found = files_beside(model_path, architecture, matches)
    if len(found) < 2:
        return ""
    return f" ({len(found)} are beside it, {', '.join(p.name for p in found)}: which one is not guessed)"


def refuse_untaken_load_options(options: Mapping[str, Any], families: Sequence[Family], who: str) -> None:
    """An InputError for the first of ``options`` that none of ``families`` takes (models of several families
    loaded by one command line each get those of their own), ``who`` saying whose they would have been."""
    for key in options:
        if all(key not in family.load_option_names() for family in families):
            names = ", ".join(sorted({family.name for family in families}))
            raise InputError(f"{who} takes the load option '{key}' (families: {names})")


def _accept(gguf: GGUFFile) -> str | None:
    return None


def _no_voices(gguf: GGUFFile) -> list[str]:
    return []


def _no_traits(voice: str) -> dict[str, str]:
    return {}


def import_target(target: str) -> Any:
    """``"module:name"`` -> the object, importing the module."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Family:
    """One model family: everything the shared layers need to know about it, in one place."""

    name: str  # the public name: `ggtts convert NAME`, /v1/models, ggtts.families()
    description: str
    architectures: tuple[str, ...]  # GGUF architectures of the files ``ggtts.load`` opens for it
    pipeline: str | type[TTSModel]  # the TTSModel subclass, or "module:Class" to import it on first use
    options: type  # a dataclass of per-call options (fields made with :func:`option`)
    load_options: type = LoadOptions  # a dataclass of the loader's options: LoadOptions or a subclass
    capabilities: Capabilities = Capabilities()
    # None when the file is one of this family's; else one sentence saying why not. Reads metadata only.
    recognize: Callable[[GGUFFile], str | None] = _accept
    voices: Callable[[GGUFFile], list[str]] = _no_voices  # voice names from metadata, without loading weights
    # more voices come with files given at load (OuteTTS's speaker profiles): a voice that ``voices`` does not list
    # is left for the model to check
    more_voices_at_load: bool = False
    voice_traits: Callable[[str], dict[str, str]] = _no_traits  # what a voice's name tells: language, gender
    # the ``lang`` codes a file itself speaks, where the capabilities list what the family's files may hold
    file_languages: Callable[[GGUFFile], Sequence[str]] | None = None
    companions: tuple[Companion, ...] = ()
    # (gguf, voice) -> the voice's own file, where the voice is one (a cloned voice beside the model)
    voice_file: Callable[[GGUFFile, str], Path | None] | None = None
    # files of its own it writes and reads beside a model, by GGUF architecture: what each is (``ggtts info``)
    side_files: Mapping[str, str] = field(default_factory=dict)
    converters: Mapping[str, str] = field(default_factory=dict)  # `ggtts convert NAME` -> "module:function"
    decoder: str | None = None  # "module:function" for `ggtts decode` (codes -> audio), if the family has one
    decodes_with: str | None = None  # the GGUF architecture of the file that decoder takes
    # measurement parts ("module:function"), where the family has them: `ggtts parity NAME` runs ``parity()`` ->
    # a list of stage results; `ggtts bench` on one of its files runs ``bench(args, model_path)`` -> exit status
    parity: str | None = None
    bench: str | None = None
    # built-in model names -> "module:function" returning the GGUF path, built from installed packages on first use
    builtins: Mapping[str, str] = field(default_factory=dict)
    # "module:function" (gguf, text, per-call options, the lexicon load option) -> load options with which the model
    # takes up work on the text begun now, while it loads (`ggtts speak`: Kokoro reads the text in a child process)
    read_ahead: str | None = None
    # (load options, the device resolved: cpu or cuda:N) -> an InputError for options that device does not run
    # (OuteTTS's compile on a CPU); :meth:`check_load_on` runs it before any model loads
    device_check: Callable[[Mapping[str, Any], str], None] | None = None

    def model_class(self) -> type[TTSModel]:
        if isinstance(self.pipeline, type):
            return self.pipeline
        cls: type[TTSModel] = import_target(self.pipeline)
        return cls

    def converter(self, name: str) -> Callable[[list[Path], Path, str], Path]:
        converter: Callable[[list[Path], Path, str], Path] = import_target(self.converters[name])
        return converter

    def check_speed(self, speed: float | str) -> float:
        """``speed`` checked against the family's range (a family without speed control takes only its one)."""
        low, high = self.capabilities.speed
        if low == high:
            value = check_speed(speed, (min(low, MIN_SPEED), max(high, MAX_SPEED)))
            if value != low:
                raise InputError(f"{self.name} has no speed control; use speed {low:g}")
            return value
        return check_speed(speed, (low, high))

    def describe_capabilities(self, gguf: GGUFFile | None = None) -> str:
        """What the family's models do; with ``gguf``, the languages that file speaks where it says."""
        from ggtts.errors import GGTTSError

        c = self.capabilities
        languages: Sequence[str] = c.languages
        if gguf is not None and self.file_languages is not None:
            with contextlib.suppress(GGTTSError):
                languages = self.file_languages(gguf)
        parts = [f"speed {c.speed[0]:g} to {c.speed[1]:g}" if c.speed[0] != c.speed[1] else "fixed speed"]
        parts += ["voice blends"] if c.blending else []
        parts += ["phoneme input"] if c.phonemes else []
        parts += [f"languages {', '.join(languages)}"] if languages else []
        parts += [f"up to {c.max_input_chars} characters"]
        parts += ["streaming"] if c.streaming else []
        parts += ["word timestamps"] if c.timestamps else []
        parts += ["chat (questions as text or audio)"] if c.chat else []
        return "; ".join(parts)

    def option_names(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self.options)]

    def call_option_names(self, streaming: bool) -> list[str]:
        """The per-call options ``stream`` (``streaming``) or ``synthesize`` takes."""
        fields = dataclasses.fields(self.options)
        return [f.name for f in fields if streaming or not f.metadata.get("streaming_only")]

    def check_request(self, text: str, speed: float | str, options: Mapping[str, Any]) -> None:
        """What a request can be told without the model: its text, speed and options against the record (a
        command line runs this before loading, so a mistake costs no load; the pipeline checks again)."""
        check_text(text, self.capabilities.max_input_chars)
        self.check_speed(speed)
        self.check_options(options)

    def check_voice(self, voice: str | None, gguf: GGUFFile) -> None:
        """``voice`` (a name or a blend) against the voices the file's metadata lists, before anything is loaded.
        A family whose voices come only at load (OuteTTS's speaker files) leaves the check to its model."""
        if voice is None or self.voices is _no_voices or self.more_voices_at_load:
            return
        voices = self.voices(gguf)
        self.check_blend(parse_voice(voice, voices), voices)

    def check_blend(self, mix: VoiceMix, voices: Sequence[str]) -> None:
        """A blend of ``voices`` only where the family blends them."""
        if mix.single is None and not self.capabilities.blending:
            raise VoiceBlendError(f"{self.name} cannot blend voices; choose one of {', '.join(voices)}")

    def load_option_names(self) -> list[str]:
        """The loader's options: its dataclass's fields and the companion files it takes."""
        return [f.name for f in dataclasses.fields(self.load_options)] + [c.option for c in self.companions]

    def own_load_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """Those of ``options`` the family takes (where one command line loads models of several families)."""
        known = self.load_option_names()
        return {key: value for key, value in options.items() if key in known}

    def check_load_options(self, options: Mapping[str, Any]) -> None:
        """An InputError naming the first load option the family does not take, or the first bad value of one it
        takes; before anything is loaded."""
        known = self.load_option_names()
        for key in options:
            if key not in known:
                raise InputError(f"{self.name} has no load option '{key}'; it takes {', '.join(known)}")
        for companion in self.companions:
            if options.get(companion.option) is not None:
                check_path(companion.option)(options[companion.option])
        check_option_values(self.load_options, options)

    def checked_load_options(
        self, options: Mapping[str, Any], device: str | None = None, *, own_only: bool = True
    ) -> dict[str, Any]:
        """The load options this family's model gets of a command line's ``options`` (those it takes, where
        ``own_only``: models of several families share the line; else all, its loader refusing one it does not
        take), checked (:meth:`check_load_options`) and, with ``device``, against it (:meth:`check_load_on`):
        what a server or job of several models runs for each before the first loads."""
        own = self.own_load_options(options) if own_only else dict(options)
        self.check_load_options(own)
        if device is not None:
            self.check_load_on(own, device)
        return own

    def check_load_on(self, options: Mapping[str, Any], device: str) -> None:
        """``options`` against the ``device`` they load on (resolved): bfloat16 only where it is native there, and
        the family's own :attr:`device_check`. A server or job of several models runs this for each before the
        first loads, so a combination one of them refuses does not stop it after minutes of loading the others."""
        if options.get("precision") is not None and "precision" in self.load_option_names():
            check_precision(options["precision"], device)
        if self.device_check is not None:
            self.device_check(options, device)

    def check_options(self, options: Mapping[str, Any], allowed: Sequence[str] | None = None) -> None:
        """An InputError naming the first option in ``options`` the family does not take (``None`` values are
        not asked for and pass), or the first bad value of one it takes (its ``check``, a seed out of range, say).
        ``allowed`` narrows the names one call takes (windowing only when streaming)."""
        known = list(allowed) if allowed is not None else self.option_names()
        for key, value in options.items():
            if key not in known and value is not None:
                raise InputError(self._unknown_option(key, known))
        check_option_values(self.options, options)

    def _unknown_option(self, key: str, known: Sequence[str]) -> str:
        if key == "phonemes" and not self.capabilities.phonemes:
            return f"{self.name} takes text, not phonemes"
        if key == "lang" and not self.capabilities.languages:
            return f"{self.name} has no language option (lang); it reads the text as given"
        return f"unknown option '{key}' for {self.name}; known: {', '.join(sorted(known))}"
