"""Kokoro pipeline: text or phonemes -> token ids through the file's vocabulary -> model -> audio chunks."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ggtts.audio import Audio, WordTiming
from ggtts.errors import GGTTSError, InputError
from ggtts.families.base import AudioStream, NothingToSay, Request, TTSModel, VoiceMix, check_seed
from ggtts.families.kokoro import FAMILY, KokoroOptions
from ggtts.families.kokoro.frontend import Phonemizer, TextAhead, english, not_japanese, text_key
from ggtts.families.kokoro.frontend import text_frontend as _text_frontend
from ggtts.gguf import GGUFFile
from ggtts.models.kokoro.config import KokoroConfig
from ggtts.models.kokoro.load import load_kokoro
from ggtts.models.kokoro.model import HEAD_CONTEXT_FRAMES, KokoroModel
from ggtts.models.layers.validate import damaged_weights_error
from ggtts.text.chunking import Chunk, SpokenWord
from ggtts.text.lexicon import Lexicon
from ggtts.text.normalize import NORMALIZE_ALL, Normalization

log = logging.getLogger(__name__)

# When streaming, a long first chunk is cut at its first clause or sentence break, so the first audio comes
# after a short synthesis instead of a whole 510-phoneme chunk. Only at punctuation: a cut between two words
# of one clause gives the first word group a phrase-final intonation, which listeners (and Whisper) mishear.
FIRST_CHUNK_PHONEMES = 120  # the break must come within this many phonemes (about eight seconds of speech)
_FIRST_BREAK = re.compile(r"[.!?…;:,—]+[\"')\]]*\s+")
_SENTENCE_END = re.compile(r"[.!?…]")
# Later chunks are cut too, each to at most GROWTH times the phonemes said before it: a 3.8 s first sentence is
# followed by up to 7.6 s, then 23 s..., each synthesized while the audio before it plays (at a real-time factor
# below 1/3), where a whole 510-phoneme second chunk would leave a gap (measured: 1.2 s in float32 on 2 cores).
GROWTH = 2

WARM_UP_PHONEMES = "hˈI ðˈɛɹ."  # "hi there": what warm_up speaks

# Each chunk is synthesized on its own, so its first and last samples need not meet its neighbours' at zero:
# a few milliseconds of raised-cosine fade at both ends keeps the joins free of clicks.
EDGE_FADE_S = 0.003

# fast_start=True: the first chunk's head, rendered on its own (KokoroModel.decode_fast_start), ends at the
# quietest frame between these two times; chunks shorter than FAST_START_MIN_S are rendered whole, as usual (a
# voice agent's one-word first clause, "Sure," with its pauses, is 1.25 s: its head comes 7-11 % sooner, a two-word
# one's, "Hello there," 1.6 s, 0.43 -> 0.31 s on a 2-core Zen 4). The head ends HEAD_CONTEXT_FRAMES + 1 frames
# before the chunk's end at the latest.
FAST_START_EARLIEST_S = 0.5
FAST_START_LATEST_S = 0.9
FAST_START_MIN_S = 1.0


def fade_edges(samples: np.ndarray, n: int, *, start: bool = True, end: bool = True) -> np.ndarray:
    """``samples`` with a raised-cosine fade over the first and last ``n`` samples (in place; ``start``/``end``
    False leave that edge as it is: it joins a part of the same rendering)."""
    n = min(n, len(samples) // 2)
    if n > 0:
        ramp = (0.5 - 0.5 * np.cos(np.pi * (np.arange(n) + 0.5) / n)).astype(samples.dtype)
        if start:
            samples[:n] *= ramp
        if end:
            samples[-n:] *= ramp[::-1]
    return samples


@dataclass(frozen=True)
class _Part:
    """Audio of one chunk, or of part of one (``joins_next``: the next part continues this rendering)."""

    samples: np.ndarray
    words: tuple[WordTiming, ...]
    joins_next: bool = False


def _phoneme_input(phonemes: str, max_phonemes: int, vocab: frozenset[str]) -> Iterator[Chunk]:
    from ggtts.text.frontend import phonemes_to_chunks

    yield from phonemes_to_chunks(phonemes, max_phonemes, vocab=vocab)


def _as_chunk(chunk: str | Chunk) -> Chunk:
    """A phonemizer's plain phoneme string as a chunk whose words are its phoneme words."""
    if isinstance(chunk, Chunk):
        return chunk
    words = tuple(SpokenWord(w, (w,)) for w in chunk.split())
    return Chunk(chunk, chunk, words=words)


def _breaks(chunk: Chunk, spans: list[tuple[int, int] | None]) -> Iterator[re.Match[str]]:
    """``chunk``'s punctuation breaks that fall between two written words and before its end."""
    inside = [span for span in spans if span is not None]
    for brk in _FIRST_BREAK.finditer(chunk.phonemes):
        if brk.end() >= len(chunk.phonemes):
            return  # the break at the very end: nothing to cut
        if not any(start < brk.start() < end for start, end in inside):  # "555-1234": one word said with pauses
            yield brk


def _split(chunk: Chunk, brk: re.Match[str], spans: list[tuple[int, int] | None]) -> tuple[Chunk, Chunk]:
    """``chunk``'s phonemes before and after the break ``brk``, each part with the words said in it."""
    cut = brk.start() + len(brk[0].rstrip())
    head = tuple(w for w, span in zip(chunk.words, spans, strict=True) if span is not None and span[1] <= cut)
    tail = tuple(w for w, span in zip(chunk.words, spans, strict=True) if span is None or span[1] > cut)
    return (
        Chunk(" ".join(w.text for w in head), chunk.phonemes[:cut], words=head),
        Chunk(" ".join(w.text for w in tail), chunk.phonemes[brk.end() :], words=tail),
    )


def _cut_first(chunk: Chunk) -> tuple[Chunk, ...]:
    """``chunk``, or its phonemes before and after its first punctuation break (ending within
    FIRST_CHUNK_PHONEMES) that falls between two words and before its end, each part with the words said in it."""
    from ggtts.families.kokoro.timing import phoneme_spans

    spans = phoneme_spans(chunk.phonemes, chunk.words)
    for brk in _breaks(chunk, spans):
        if brk.end() > FIRST_CHUNK_PHONEMES:
            break
        return _split(chunk, brk, spans)
    return (chunk,)


def _cut_within(chunk: Chunk, limit: int) -> tuple[Chunk, ...]:
    """``chunk``, or where it has more than ``limit`` phonemes, its phonemes before and after its last sentence
    break ending within ``limit`` (else its last clause break there); ``chunk`` where it has neither."""
    from ggtts.families.kokoro.timing import phoneme_spans

    if len(chunk.phonemes) <= limit:
        return (chunk,)
    spans = phoneme_spans(chunk.phonemes, chunk.words)
    within = [brk for brk in _breaks(chunk, spans) if brk.end() <= limit]
    sentences = [brk for brk in within if _SENTENCE_END.search(brk[0])]
    candidates = sentences or within
    return _split(chunk, candidates[-1], spans) if candidates else (chunk,)


def _quick_start(chunks: Iterable[Chunk]) -> Iterator[Chunk]:
    """The same phonemes, in chunks that start speaking soon and keep a stream fed: a long first chunk cut at its
    first punctuation break (:func:`_cut_first`), and every later one at most :data:`GROWTH` times as many phonemes
    as all before it, cut at its last sentence (else clause) break within that (:func:`_cut_within`), so that
    each is synthesized while those before it play, wherever the real-time factor is below 1 / (GROWTH + 1)."""
    said = 0  # phonemes in the chunks yielded so far
    for chunk in chunks:
        parts = _cut_first(chunk) if said == 0 else _cut_within(chunk, GROWTH * said)
        while len(parts) == 2:
            said += len(parts[0].phonemes)
            yield parts[0]
            parts = _cut_within(parts[1], GROWTH * said)
        said += len(parts[0].phonemes)
        yield parts[0]


class KokoroTTS(TTSModel):
    family = FAMILY

    def __init__(
        self,
        config: KokoroConfig,
        model: KokoroModel,
        voicepacks: dict[str, torch.Tensor],
        vocab: dict[str, int],
        device: str | torch.device = "cpu",
        phonemizer: Phonemizer | None = None,
    ) -> None:
        self.config = config
        self.model = model
        self.voicepacks = voicepacks
        self.vocab = vocab
        self.device = torch.device(device)
        self.sample_rate = config.sample_rate
        self.phonemizer: Phonemizer = phonemizer or _text_frontend
        self.source: str | None = None  # the file it came from, named when its weights turn out damaged

    @classmethod
    def from_gguf(cls, gguf: GGUFFile, device: str = "cpu", **options: Any) -> KokoroTTS:
        """``options``: ``phonemizer`` (text, language, max phonemes, vocabulary) -> phoneme chunks, replacing the
        built-in frontend (:data:`~ggtts.families.kokoro.frontend.Phonemizer`);
        ``precision``: ``"float32"`` (default) or ``"bfloat16"``, the vocoder's resblock and noise-path
        convolutions in bfloat16 (faster where the hardware has it, refused where it does not; see
        :mod:`ggtts.models.kokoro.precision`); ``compile``: ``True`` runs the vocoder's upsampling stages through
        ``torch.compile`` (:mod:`ggtts.ops.compile`): the first synthesis (or :meth:`warm_up`) compiles, for
        tens of seconds; later ones are about 1.3x faster, with float32's results to float rounding; where it
        cannot compile it says so in the log and runs eagerly."""
        from ggtts.models.kokoro.precision import use_bfloat16_convolutions
        from ggtts.models.layers.channels_last import fft_convolutions
        from ggtts.models.layers.packed_linear import packed_linears
        from ggtts.ops.precision import check_precision

        phonemizer = options.pop("phonemizer", None)
        precision = options.pop("precision", "float32")
        compiled = options.pop("compile", False)
        if options:
            raise InputError(
                f"unknown option '{next(iter(options))}' for kokoro; known: phonemizer, precision, compile"
            )
        if not isinstance(compiled, bool):
            raise InputError(f"compile must be true or false, not {compiled!r}")
        check_precision(precision, device)
        config, model, voicepacks, vocab = load_kokoro(gguf, device)
        if torch.device(device).type == "cpu":  # the vocoder's stages channels-last (models/layers/channels_last.py)
            model.decoder.generator.use_channels_last()
            fft_convolutions(model.decoder.generator)  # its wide kernels through the DFT (layers/fft_conv.py)
            for part in (model.bert, model.bert_encoder):  # PL-BERT's products through oneDNN, weights packed
                packed_linears(part)  # (layers/packed_linear.py: 24 MiB more memory, 15-30 ms less per chunk)
        if precision == "bfloat16":
            use_bfloat16_convolutions(model.decoder.generator)
        if compiled:
            from ggtts.ops.compile import CompiledOrEager

            generator = model.decoder.generator
            generator.body = CompiledOrEager(generator.body, "kokoro's vocoder (compile=True)", device)  # type: ignore[method-assign]
        tts = cls(config, model, voicepacks, vocab, device, phonemizer)
        tts.source = str(gguf.path)
        return tts

    @property
    def voices(self) -> list[str]:
        return list(self.voicepacks)

    def voice_languages(self, voice: str) -> list[str]:
        """What ``voice`` reads with no ``lang`` given: English as the file says (American unless British), and
        Japanese text where the ``ja`` extra is installed; the voice's own language first among them. A voice named
        for another language (Spanish, Chinese...) reads these too, not its own: there is no frontend for it here."""
        from ggtts.text.g2p import BRITISH, LANGUAGE_ALIASES
        from ggtts.text.japanese import japanese_installed

        english_lang = LANGUAGE_ALIASES.get(english(not_japanese(self.config.language)).strip().lower())
        english_code = "en_GB" if english_lang == BRITISH else "en_US"
        reads = [english_code, *(["ja"] if japanese_installed() else [])]
        own = [code for code in super().voice_languages(voice) if code in reads]
        return [*own, *(code for code in reads if code not in own)]

    def warm_up(self) -> None:
        """Build the English G2P (spaCy's tagger, misaki's lexicons: 2-4 s) of the file's language and speak a
        word, when the built-in frontend is in use (torch's first convolutions set up their kernels: ~0.5 s);
        Japanese dictionaries load on the first Japanese text."""
        if self.phonemizer is _text_frontend:
            from ggtts.text import g2p

            g2p.get_g2p(english(not_japanese(self.config.language))).load()
            self.synthesize_phonemes(WARM_UP_PHONEMES)

    # ---- inputs --------------------------------------------------------------------------------------------
    def voicepack(self, voice: str | None) -> torch.Tensor:
        """A voice name, or a blend ``"a:0.6,b:0.4"`` (``"a,b"`` weighs them equally) -> (N, 1, 2 * style)."""
        if voice is None:
            voice = self.default_voice
        if not voice or not voice.strip():
            raise InputError(f"no voice given; choose one of {', '.join(self.voices)}")
        return self._pack(self.resolve_voice(voice))

    def _pack(self, mix: VoiceMix | None) -> torch.Tensor:
        if mix is None:
            raise InputError(f"no voice given; choose one of {', '.join(self.voices)}")
        packs = [self.voicepacks[name] for name, _ in mix.parts]
        if len(packs) == 1:
            return packs[0]
        rows = min(p.shape[0] for p in packs)
        return sum(
            (p[:rows] * weight for p, (_, weight) in zip(packs, mix.parts, strict=True)),
            torch.zeros_like(packs[0][:rows]),
        )

    def token_ids(self, phonemes: str) -> list[int]:
        """Phoneme characters -> ids; characters outside the vocabulary are dropped, as upstream does."""
        ids = [self.vocab[c] for c in phonemes if c in self.vocab]
        if len(ids) > self.config.max_phonemes:
            raise InputError(f"{len(ids)} phonemes in one chunk; the model takes at most {self.config.max_phonemes}")
        return ids

    # ---- synthesis -----------------------------------------------------------------------------------------
    def synthesize_phonemes(
        self,
        phonemes: str,
        voice: str | None = None,
        speed: float = 1.0,
        seed: int = 0,
    ) -> Audio:
        """One phoneme chunk (at most ``config.max_phonemes`` phonemes) -> audio, its words the phoneme words."""
        speed = FAMILY.check_speed(speed)
        if voice is not None and not isinstance(voice, str):
            raise InputError(f"voice must be a voice's name or a blend (str), got {type(voice).__name__}")
        generator = torch.Generator(device=self.device).manual_seed(check_seed(seed))
        parts = list(self._parts(_as_chunk(phonemes), self.voicepack(voice), speed, generator, 0.0))
        if not parts:
            return Audio(np.zeros(0, dtype=np.float32), self.sample_rate)
        return Audio(parts[0].samples, self.sample_rate, parts[0].words)

    def run(self, request: Request[KokoroOptions]) -> AudioStream:
        """Audio chunk by chunk: text through the frontend, or (``phonemes=True``) a phoneme string as is.

        The chunks concatenate to exactly what :meth:`synthesize` returns (it is built from them). Each carries
        the words said in it with their times from the start of the utterance (``Audio.words``). The first chunk
        ends at the first clause break, each later one holds at most twice the phonemes said before it, cut at a
        sentence or clause break (:func:`_quick_start`): each is ready before the audio before it has played.
        ``fast_start``: a first chunk of 1 s or more comes in two parts, its head (0.5-0.9 s) rendered on its own
        first, an approximation of those frames, then the rest, exact (:meth:`KokoroModel.decode_fast_start`):
        first audio sooner, about three times on a long sentence.
        ``progress`` shows a bar over the chunks (the whole text is phonemized first to count them).
        ``normalization``: which of the English normalizer's rules run (``False``: none), see :class:`Normalization`.
        """
        o = request.options
        text, speed = request.text, request.speed
        pack = self._pack(request.voice)
        seed, lang, fast_start = o.seed, o.lang, o.fast_start
        vocab = frozenset(self.vocab)
        limit = self.config.max_phonemes
        if o.phonemes:
            chunks: Iterable[Chunk] = _phoneme_input(text, limit, vocab)
        else:
            key = text_key(text, lang, self.config.language, limit, vocab, o.normalization, self.lexicon)
            chunks = map(_as_chunk, self._phonemize(*key))
        chunks = _quick_start(chunks)
        if o.progress:
            from tqdm import tqdm

            chunks = tqdm(list(chunks), desc="speaking", unit="chunk", leave=False)
        generator = torch.Generator(device=self.device).manual_seed(seed)
        fade = round(EDGE_FADE_S * self.sample_rate)
        done = 0  # samples yielded so far
        last: int | None = None  # the source of the last word said: a word cut by a chunk boundary goes on
        joined = False  # the part before continues into this one: no fade between them
        for chunk in chunks:
            fast = fast_start and done == 0  # the first chunk that says anything
            for part in self._parts(chunk, pack, speed, generator, done / self.sample_rate, last, fast):
                samples = fade_edges(part.samples, fade, start=not joined, end=not part.joins_next)
                joined = part.joins_next
                yield Audio(samples, self.sample_rate, part.words, done / self.sample_rate)
                done += len(samples)
            last = chunk.words[-1].source if chunk.words else last
        if not done:
            raise NothingToSay(text)

    def _phonemize(
        self, text: str, lang: str, limit: int, vocab: frozenset[str], switches: Normalization, lexicon: Lexicon | None
    ) -> Iterable[str | Chunk]:
        """The phonemizer's chunks; other than default ``switches`` only for the built-in frontend (a phonemizer of
        one's own does its own normalizing; it is given the text with the ``lexicon``'s words said)."""
        if switches == NORMALIZE_ALL and lexicon is None:
            return self.phonemizer(text, lang, limit, vocab)
        if isinstance(self.phonemizer, TextAhead):  # the built-in frontend, begun in a child process
            return self.phonemizer(text, lang, limit, vocab, switches, lexicon)
        if self.phonemizer is _text_frontend:
            return _text_frontend(text, lang, limit, vocab, switches, lexicon)
        if switches != NORMALIZE_ALL:
            raise InputError(
                "normalization settings are for the built-in text frontend, and this model was given a phonemizer "
                "of its own: leave normalization out"
            )
        return self.phonemizer(text if lexicon is None else lexicon.said(text), lang, limit, vocab)

    def _parts(
        self,
        chunk: Chunk,
        pack: torch.Tensor,
        speed: float,
        generator: torch.Generator,
        offset: float,
        continues: int | None = None,
        fast_start: bool = False,
    ) -> Iterator[_Part]:
        """One chunk -> its audio with its words' times (``offset`` seconds added; ``continues``: the source of the
        word said last, see :func:`word_timings`): one part, or with ``fast_start`` and a chunk long enough, its
        head rendered alone then the rest (:meth:`KokoroModel.decode_fast_start`), each word in the part where it
        starts. Nothing for a chunk without phonemes of the vocabulary."""
        from ggtts.families.kokoro.timing import word_timings

        phonemes = chunk.phonemes
        ids = self.token_ids(phonemes)
        if not ids:
            return
        # upstream picks the style row by the phoneme string's length (KPipeline.infer: pack[len(ps) - 1])
        ref_s = pack[min(len(phonemes), pack.shape[0]) - 1]
        edge = self.config.bos_eos_id
        input_ids = torch.tensor([[edge, *ids, edge]], dtype=torch.long, device=self.device)
        model = self.model
        with self._checked():
            inputs = model.decoder_inputs(input_ids, ref_s, speed)
        frames = inputs.durations.tolist()
        per_frame = model.samples_per_frame
        seconds_per_frame = per_frame / self.sample_rate
        words = tuple(
            word_timings(phonemes, chunk.words, frames, self.vocab.keys(), seconds_per_frame, offset, continues)
        )
        earliest, latest = (round(t / seconds_per_frame) for t in (FAST_START_EARLIEST_S, FAST_START_LATEST_S))
        total = sum(frames)
        # the head's rendering (its frames and their context) must stop short of the chunk's end, or it is the
        # whole chunk rendered twice
        latest = min(latest, total - HEAD_CONTEXT_FRAMES - 1)
        fast = fast_start and total * seconds_per_frame >= FAST_START_MIN_S and 0 < earliest <= latest < total
        with self._checked():
            if not fast:
                audio = model.decode(inputs.asr, inputs.f0, inputs.n, ref_s, generator)
            else:
                rendering = model.decode_fast_start(inputs.asr, inputs.f0, inputs.n, ref_s, earliest, latest, generator)
                audio = next(rendering)  # the head
        if not fast:
            yield _Part(self._samples(audio), words)
            return
        cut = offset + audio.shape[-1] / self.sample_rate
        yield _Part(self._samples(audio), tuple(w for w in words if w.start < cut), joins_next=True)
        with self._checked():
            rest = next(rendering)
        yield _Part(self._samples(rest), tuple(w for w in words if w.start >= cut))

    @contextlib.contextmanager
    def _checked(self) -> Iterator[None]:
        """Model calls: a RuntimeError (NaN durations, say) names damaged weights where it can."""
        with torch.inference_mode():
            try:
                yield
            except RuntimeError as e:
                raise (damaged_weights_error(self.model, self.source) or e) from e

    def _samples(self, audio: torch.Tensor) -> np.ndarray:
        """(1, samples) -> float32 samples; non-finite audio is an error (damaged weights, or a bug)."""
        if not bool(torch.isfinite(audio).all()):
            raise damaged_weights_error(self.model, self.source) or GGTTSError(
                "synthesis produced non-finite audio (inf or NaN)"
            )
        return audio.squeeze(0).float().cpu().numpy()
