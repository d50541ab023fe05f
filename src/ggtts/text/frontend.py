"""The English text frontend a Kokoro pipeline calls: normalize, G2P, chunk, keep the model's symbols."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import re
from collections.abc import Iterable, Iterator, Sequence, Set

from ggtts.runtime.cancel import check_cancelled
from ggtts.text.chunking import (
    KOKORO_MAX_PHONEMES,
    PARAGRAPH_BREAK,
    SENTENCE_END,
    Chunk,
    SpokenWord,
    chunk_pieces,
    is_spoken,
    iter_paragraphs,
    iter_phoneme_chunks,
)
from ggtts.text.g2p import BRITISH, G2PToken, resolve_language
from ggtts.text.lexicon import Lexicon
from ggtts.text.normalize import NORMALIZE_ALL, Normalization, normalize_tracked, unmarked
from ggtts.text.sanitize import bound_marks, break_long_runs
from ggtts.text.tracking import SourceCursor, Tracked

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
            words = tuple(_filtered_word(w, vocab) for w in chunk.words)
            words = tuple(w for w in words if w.phonemes)
            chunk = Chunk(chunk.text, filter_phonemes(chunk.phonemes, vocab), chunk.tokens, words)
        if is_spoken(chunk.phonemes):
            yield chunk


def _filtered_word(word: SpokenWord, vocab: Set[str]) -> SpokenWord:
    parts = (filter_phonemes(p, vocab) for p in word.phonemes)
    return dataclasses.replace(word, phonemes=tuple(p for p in parts if is_spoken(p)))


def _trace_words(paragraphs: Iterable[Sequence[Chunk]], cursor: SourceCursor) -> Iterator[Chunk]:
    """The chunks with their spoken words, each traced back to the written words it says, a paragraph at a time.

    Tokens that say one written word ("five" and "dollars" from "$5", the pieces of a cut word) become one
    word; punctuation says nothing and is no word; a token the cursor cannot place is a word of its own. A
    written word whose tokens fall in two chunks is a word in each, with the same ``source`` (the pipeline
    joins their timings); the first of them ``goes_on``. No word goes on past its paragraph.
    """
    previous: SpokenWord | None = None  # the last word of the chunk before
    for chunks in paragraphs:
        traced: list[Chunk] = []
        for chunk in chunks:
            words = _traced_words(chunk, cursor, previous)
            previous = words[-1] if words else previous
            traced.append(Chunk(chunk.text, chunk.phonemes, chunk.tokens, tuple(words)))
        for chunk, after in itertools.zip_longest(traced, traced[1:]):
            yield chunk if after is None else _marked_going_on(chunk, after)


def _traced_words(chunk: Chunk, cursor: SourceCursor, previous: SpokenWord | None) -> list[SpokenWord]:
    """``chunk``'s spoken words (see :func:`_trace_words`); ``previous``: the last word of the chunk before."""
    words: list[SpokenWord] = []
    span: tuple[int, int] | None = None  # the written words the last word covers
    for token in chunk.tokens:
        place = cursor.locate(token.text) if token.text else None
        if not is_spoken(token.phonemes):
            if words and any(c in SENTENCE_END for c in token.phonemes):
                words[-1] = dataclasses.replace(words[-1], ends_sentence=True)
            continue
        joins = words and (not token.text or (place is not None and span is not None and place.first <= span[1]))
        if joins and place is not None and span is not None:
            span = (span[0], max(span[1], place.last))
            words[-1] = SpokenWord(cursor.shown(*span), (*words[-1].phonemes, token.phonemes), span[0])
        elif joins:
            words[-1] = SpokenWord(words[-1].text, (*words[-1].phonemes, token.phonemes), words[-1].source)
        elif not token.text and previous is not None:  # the rest of a word cut for being over the limit
            words.append(SpokenWord(previous.text, (token.phonemes,), previous.source))
        else:
            span = None if place is None else (place.first, place.last)
            text = token.text if place is None else place.text
            words.append(SpokenWord(text, (token.phonemes,), None if place is None else place.first))
    return words


def _marked_going_on(chunk: Chunk, after: Chunk) -> Chunk:
    """``chunk``, its last word marked ``goes_on`` where ``after`` begins with the rest of it."""
    if not (chunk.words and after.words) or chunk.words[-1].source is None:
        return chunk
    if chunk.words[-1].source != after.words[0].source:
        return chunk
    words = (*chunk.words[:-1], dataclasses.replace(chunk.words[-1], goes_on=True))
    return dataclasses.replace(chunk, words=words)


def text_to_phoneme_chunks(
    text: str,
    lang: str = "a",
    max_phonemes: int = KOKORO_MAX_PHONEMES,
    *,
    vocab: Set[str] | None = None,
    normalization: Normalization = NORMALIZE_ALL,
    lexicon: Lexicon | None = None,
) -> Iterator[Chunk]:
    """English text -> chunks of at most ``max_phonemes`` phonemes, in order, ready for the model.

    ``lang`` is ``"a"`` (American) or ``"b"`` (British) or an alias (``"en-us"``, ``"en-gb"``). With
    ``vocab``, symbols outside it are removed (the limit still holds: filtering only shortens). Chunks left
    with nothing to say (no phonemes, or only punctuation) are skipped; empty text yields nothing.
    ``normalization`` says which groups of :mod:`ggtts.text.normalize`'s rules run (all by default); a ``lexicon``'s
    words are said as it says, first (:mod:`ggtts.text.lexicon`; the words keep the spans of those written).
    The cost is linear in the length of ``text``, whatever it holds (see :mod:`ggtts.text.sanitize`).
    """
    code = resolve_language(lang)
    source = bound_marks(text)  # what the words' texts are taken from: ``text`` itself, unless it was sanitized
    tracked = normalize_tracked(source, british=code == BRITISH, switches=normalization, lexicon=lexicon)
    normalized = break_long_runs(tracked.text)  # only adds spaces: the cursor still finds every token
    paragraphs = iter_paragraphs(normalized, lang=code, max_phonemes=max_phonemes)
    yield from _keep_vocab(_trace_words(paragraphs, SourceCursor(tracked, source)), vocab)


def phonemes_to_chunks(
    phonemes: str, max_phonemes: int = KOKORO_MAX_PHONEMES, *, vocab: Set[str] | None = None
) -> Iterator[Chunk]:
    """Phonemes the user wrote -> chunks under the limit, split at punctuation then spaces; the words are the
    phoneme words as written."""
    chunks = list(iter_phoneme_chunks(phonemes, max_phonemes))
    yield from _keep_vocab(_trace_words([chunks], SourceCursor(Tracked.of(phonemes), phonemes)), vocab)


# Japanese sentences end at these marks, with no space after them.
# (a full-width period between digits is a decimal point, １．５: no sentence ends there)
_NOT_AN_END = r"(?:[^。．！？!?]|．(?=[0-9０-９]))"
_JAPANESE_SENTENCE = re.compile(rf"{_NOT_AN_END}*(?:[。！？!?]|．(?![0-9０-９]))+[」』”）)]*|{_NOT_AN_END}+")


def _spaced(tokens: list[G2PToken]) -> list[G2PToken]:
    """Japanese tokens with a space after each word that its phonemes have a space after (the text has none):
    the chunker splits only where there is whitespace, and the words of a written run are found by it."""
    from ggtts.text.japanese import join_japanese_phonemes

    spoken = [i for i, t in enumerate(tokens) if t.phonemes]
    space = {
        i
        for i, j in itertools.pairwise(spoken)
        if " " in join_japanese_phonemes([tokens[i], tokens[j]])[len(tokens[i].phonemes) :][:1]
    }
    return [G2PToken(t.text.strip(), t.phonemes, " " if i in space else "") for i, t in enumerate(tokens)]


def japanese_to_phoneme_chunks(
    text: str,
    max_phonemes: int = KOKORO_MAX_PHONEMES,
    *,
    vocab: Set[str] | None = None,
    normalization: Normalization = NORMALIZE_ALL,
    lexicon: Lexicon | None = None,
) -> Iterator[Chunk]:
    """Japanese text -> chunks of at most ``max_phonemes`` phonemes, cut at sentence ends (。！？), then at 、,
    then between words; each word (as the G2P finds them, with its punctuation) is a word for timestamps.

    A ``lexicon``'s words are said as it says first; Markdown, HTML and decorative emoji go next
    (:mod:`ggtts.text.markup`), unless ``normalization`` says not to;
    numbers, dates and counters are read by :mod:`ggtts.text.japanese`; a blank line ends a paragraph and a line
    break is a boundary, as for English.
    """
    from ggtts.text.japanese import JapaneseG2P

    g2p = JapaneseG2P()
    done = 0  # written words in the paragraphs before
    text = unmarked(bound_marks(text if lexicon is None else lexicon.said(text)), normalization)
    for paragraph in PARAGRAPH_BREAK.split(text):
        sentences: list[list[G2PToken]] = []
        for line in paragraph.split("\n"):
            for sentence in _JAPANESE_SENTENCE.findall(line.strip()):
                check_cancelled()  # the G2P is no torch module: a cancelled request stops between sentences
                tokens = _spaced(g2p.tokens(sentence))
                if tokens:
                    sentences.append(tokens)
        # the words are the tokens: the source the cursor reads is the tokens' texts, spaced like their phonemes
        source = "\n".join("".join(t.text + t.whitespace for t in tokens) for tokens in sentences)
        chunks = list(chunk_pieces(sentences, max_phonemes))
        cursor = SourceCursor(Tracked.of(source), source)
        for chunk in _keep_vocab(_trace_words([chunks], cursor), vocab):
            # numbered across paragraphs, so that two paragraphs' words never look like one word's parts
            words = [w if w.source is None else dataclasses.replace(w, source=w.source + done) for w in chunk.words]
            yield dataclasses.replace(chunk, words=tuple(words))
        done += cursor.word_count
