"""The English text frontend a Kokoro pipeline calls: normalize, G2P, chunk, keep the model's symbols."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Set

from ggtts.text.chunking import KOKORO_MAX_PHONEMES, Chunk, is_spoken, iter_chunks, iter_phoneme_chunks
from ggtts.text.g2p import BRITISH, resolve_language
from ggtts.text.normalize import normalize
from ggtts.text.sanitize import bound_marks, break_long_runs

log = logging.getLogger(__name__)

_RUNS_OF_SPACES = re.compile(" {2,}")


def filter_phonemes(phonemes: str, vocab: Set[str]) -> str:
    """Drop every symbol the model does not know (logged at debug level); never fails."""
    kept = "".join(c for c in phonemes if c in vocab)
    if len(kept) != len(phonemes):
        log.debug("dropped phonemes not in the vocabulary: %r", sorted(set(phonemes) - set(vocab)))
    return _RUNS_OF_SPACES.sub(" ", kept).strip()


def _keep_vocab(chunks: Iterator[Chunk], vocab: Set[str] | None) -> Iterator[Chunk]:
    for chunk in chunks:
        if vocab is not None:
            chunk = Chunk(text=chunk.text, phonemes=filter_phonemes(chunk.phonemes, vocab))
        if is_spoken(chunk.phonemes):
            yield chunk


def text_to_phoneme_chunks(
    text: str,
    lang: str = "a",
    max_phonemes: int = KOKORO_MAX_PHONEMES,
    *,
    vocab: Set[str] | None = None,
) -> Iterator[Chunk]:
    """English text -> chunks of at most ``max_phonemes`` phonemes, in order, ready for the model.

    ``lang`` is ``"a"`` (American) or ``"b"`` (British) or an alias (``"en-us"``, ``"en-gb"``). With
    ``vocab``, symbols outside it are removed (the limit still holds: filtering only shortens). Chunks left
    with nothing to say (no phonemes, or only punctuation) are skipped; empty text yields nothing.
    The cost is linear in the length of ``text``, whatever it holds (see :mod:`ggtts.text.sanitize`).
    """
    code = resolve_language(lang)
    normalized = break_long_runs(normalize(bound_marks(text), british=code == BRITISH))
    yield from _keep_vocab(iter_chunks(normalized, lang=code, max_phonemes=max_phonemes), vocab)


def phonemes_to_chunks(
    phonemes: str, max_phonemes: int = KOKORO_MAX_PHONEMES, *, vocab: Set[str] | None = None
) -> Iterator[Chunk]:
    """Phonemes the user wrote -> chunks under the limit, split at punctuation then spaces."""
    yield from _keep_vocab(iter_phoneme_chunks(phonemes, max_phonemes), vocab)
