"""Kokoro's text frontends, and reading a text ahead while the model loads (imports no torch).

:func:`text_frontend` is the built-in phonemizer: Japanese or English text -> chunks within the model's limit.
:class:`TextAhead` runs it for one text in a child process forked before torch is imported, so that on a machine
with two cores ``ggtts speak`` builds the English G2P (spaCy's tagger, misaki's lexicons: about 1-1.5 s on a
2-core machine) while the parent imports torch and loads the model, instead of after them.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import logging
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from ggtts.errors import InputError
from ggtts.families.kokoro import ENGLISH_FOR_VOICE_LANGUAGE, JAPANESE
from ggtts.text.normalize import NORMALIZE_ALL, Normalization, normalization_switches

if TYPE_CHECKING:
    from ggtts.gguf import GGUFFile
    from ggtts.text.chunking import Chunk
    from ggtts.text.lexicon import Lexicon

log = logging.getLogger(__name__)

Phonemizer = Callable[[str, str, int, frozenset[str]], Iterable["str | Chunk"]]
"""(text, language, max phonemes, vocabulary) -> chunks within the model's limit: phoneme strings, or
:class:`~ggtts.text.chunking.Chunk` objects, whose words then get timestamps (a plain string's words are its
phoneme words)."""

# The phonemizer's arguments: text, language, max phonemes, vocabulary, normalization switches, lexicon
Key = tuple[str, str, int, frozenset[str], Normalization, "Lexicon | None"]


def text_frontend(
    text: str,
    lang: str,
    max_phonemes: int,
    vocab: frozenset[str],
    normalization: Normalization = NORMALIZE_ALL,
    lexicon: Lexicon | None = None,
) -> Iterator[Chunk]:
    """The text frontends: Japanese (``j``: markup taken away as ``normalization`` says, numbers in kana,
    pyopenjtalk-plus's dictionary, misaki's romanization) or English (normalize as ``normalization`` says, offline
    misaki G2P, espeak-ng for unknown words), each chunking at its punctuation; a ``lexicon``'s words are said as
    it says, first."""
    from ggtts.text.frontend import japanese_to_phoneme_chunks, text_to_phoneme_chunks

    if lang.strip().lower() in JAPANESE:
        from ggtts.text.japanese import INSTALL_HINT, japanese_installed

        if not japanese_installed():
            raise InputError(f"Japanese (lang {lang!r}) is not installed here; {INSTALL_HINT}")
        yield from japanese_to_phoneme_chunks(
            text, max_phonemes, vocab=vocab, normalization=normalization, lexicon=lexicon
        )
    else:
        yield from text_to_phoneme_chunks(
            text, english(lang), max_phonemes, vocab=vocab, normalization=normalization, lexicon=lexicon
        )


def english(lang: str) -> str:
    return ENGLISH_FOR_VOICE_LANGUAGE.get(lang.strip().lower(), lang)


def not_japanese(configured: str) -> str:
    """The language text that is not Japanese is read in: the file's, American English for a Japanese file."""
    return "a" if configured.strip().lower() in JAPANESE else configured


def default_language(text: str, configured: str, *, warn: bool = True) -> str:
    """The language to read ``text`` in when none is asked for: Japanese for Japanese text (where the ``ja`` extra
    is installed; else the file's, with a warning unless not ``warn``), else the file's (American English for a
    file that says its voices are Japanese: the text is not)."""
    from ggtts.text.japanese import is_japanese, japanese_installed

    if not is_japanese(text):
        return not_japanese(configured)
    if japanese_installed():
        return JAPANESE[0]
    if warn:
        log.warning("the text looks Japanese, but the Japanese frontend is not installed (pip install 'ggtts[ja]')")
    return configured


def text_key(
    text: str,
    lang: str | None,
    configured: str,
    limit: int,
    vocab: frozenset[str],
    normalization: Normalization | bool,
    lexicon: Lexicon | None = None,
    *,
    warn: bool = True,
) -> Key:
    """The built-in phonemizer's arguments for ``text``: the call's ``lang`` (else the text's default for a file of
    the ``configured`` language), the model's ``limit`` and ``vocab``, the normalization switches, the lexicon. The
    model and :func:`read_ahead` both take them from here, so what is read ahead is what the model asks for."""
    language = lang or default_language(text, configured, warn=warn)
    return (text, language, limit, vocab, normalization_switches(normalization), lexicon)


class TextAhead:
    """The built-in frontend's chunks of one text (``key``: its arguments), made by a child process started now.

    Given to the model as its phonemizer, it hands over the child's chunks as the child makes them when the model
    asks for that text with those arguments, once. Anything else is read by :func:`text_frontend` in this process,
    as without it (the child is stopped then); so is the rest of the text where the child fails (errors are raised
    where they always are).
    """

    def __init__(self, key: Key) -> None:
        self.key = key
        context = multiprocessing.get_context("fork")
        self._receive, send = context.Pipe(duplex=False)
        args = (send, self._receive, key, os.getpid())
        self._child: Any = context.Process(target=_read, args=args, name="ggtts-read-ahead", daemon=True)
        # Ctrl-C is the parent's to handle: ignored from the fork on (not only once the child has set it up)
        main = threading.current_thread() is threading.main_thread()
        interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            self._child.start()
        finally:
            if main:
                signal.signal(signal.SIGINT, interrupt)
        send.close()  # the child's end: ours is closed, so a child that dies unheard is an EOF, not a hang
        self.taken = 0  # chunks the child made that were used

    def __call__(
        self,
        text: str,
        lang: str,
        limit: int,
        vocab: frozenset[str],
        normalization: Normalization = NORMALIZE_ALL,
        lexicon: Lexicon | None = None,
    ) -> Iterable[Chunk]:
        child, self._child = self._child, None
        if child is not None and (text, lang, limit, vocab, normalization, lexicon) == self.key:
            return self._received(child)
        if child is not None:  # not the text read ahead: its reading is of no use
            log.debug("the model asked for another text than the one read ahead: read here")
            self._stop(child)
        return text_frontend(text, lang, limit, vocab, normalization, lexicon)

    def _received(self, child: Any) -> Iterator[Chunk]:
        """The child's chunks as they come; where it fails, the rest read here. The child is gone after."""
        try:
            while (message := _message(self._receive))[0] == _CHUNK:
                self.taken += 1
                yield message[1]
        finally:  # also when the model stops asking (an error, a stream closed early): the child is stopped
            self._stop(child)
        if message[0] == _FAILED:  # the text again, here: its errors come from where they always come
            yield from itertools.islice(text_frontend(*self.key), self.taken, None)

    def _stop(self, child: Any) -> None:
        self._receive.close()
        child.terminate()
        child.join()


_CHUNK, _END, _FAILED = "chunk", "end", "failed"


def _message(receive: Connection) -> tuple[Any, ...]:
    try:
        message: tuple[Any, ...] = receive.recv()
    except (EOFError, OSError):  # the child died (killed, out of memory) before its last message
        return (_FAILED,)
    return message


def _read(send: Connection, receive: Connection, key: Key, parent: int) -> None:
    """In the child: each chunk as it is made, then the end, or ``failed`` when anything fails. ``receive``, the
    parent's end, is closed here at once: once the parent's is closed too (it has gone), a send fails instead of
    waiting for a reader that will never come; and the child is ended with its parent however the parent ends."""
    receive.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; a daemon child ends with it
    _end_with(parent)
    # The frontend needs no torch, but spaCy's thinc imports it where it can (1-2 s on 2 cores, the time saved)
    sys.modules["torch"] = None  # type: ignore[assignment]
    last: tuple[str] = (_END,)
    try:
        for chunk in text_frontend(*key):
            send.send((_CHUNK, chunk))
    except OSError:  # the parent has gone, or stopped listening (or the frontend's own): nobody to tell
        return
    except Exception:
        log.debug("reading the text ahead failed; the model reads it itself", exc_info=True)
        last = (_FAILED,)
    with contextlib.suppress(OSError):
        send.send(last)
        send.close()


def _end_with(parent: int) -> None:
    """SIGTERM to this process when its parent ends (Linux's parent-death signal), even by SIGKILL: no orphan goes on
    reading a long text for nobody. A parent that ended before the signal was set: this one ends now."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        os._exit(0)


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def read_ahead(gguf: GGUFFile, text: str, options: Mapping[str, Any], lexicon: object = None) -> dict[str, Any]:
    """Load options for ``ggtts speak``: ``phonemizer``, a :class:`TextAhead` of ``text`` as the model will read it
    (the file's language, limit and vocabulary, the call's ``lang`` and ``normalization``, the ``lexicon`` load
    option), where that pays and is
    safe: on Linux, in a process of one thread that has not imported torch (a fork copies no other thread:
    not torch's pools, nor a lock another thread holds), for text (not ``phonemes``). Empty where not."""
    from ggtts.families.base import check_text
    from ggtts.families.kokoro import FAMILY
    from ggtts.models.kokoro.config import KokoroConfig

    if "torch" in sys.modules or not sys.platform.startswith("linux") or threading.active_count() > 1:
        return {}
    if options.get("phonemes"):
        return {}
    c = KokoroConfig.from_gguf(gguf)
    text = check_text(text, FAMILY.capabilities.max_input_chars)
    normalization = options.get("normalization", True)
    from ggtts.text.lexicon import as_lexicon

    words = as_lexicon(lexicon)
    key = text_key(
        text, options.get("lang"), c.language, c.max_phonemes, frozenset(c.vocab), normalization, words, warn=False
    )
    return {"phonemizer": TextAhead(key)}
