"""espeak-ng's IPA phonemes, clause by clause, from the libespeak-ng that ``espeakng-loader`` bundles (ctypes).

``espeak_TextToPhonemes`` reads one clause per call and moves the text pointer past it (and past the one
character of the next clause it read to know that this one ended); the clause's end (period, question mark,
comma, ...) is read off the text it consumed, by espeak-ng's own table of clause punctuation (``readclause.c``):
what Piper keeps as a phoneme, and where it starts a new sentence.

espeak-ng holds one voice and one set of buffers per process, so every call takes a process-wide lock.
"""

from __future__ import annotations

import ctypes
import re
import threading
import unicodedata
from dataclasses import dataclass

from ggtts.errors import GGTTSError

AUDIO_OUTPUT_SYNCHRONOUS = 2
INITIALIZE_DONT_EXIT = 0x8000  # espeak-ng exits the process on a failed start unless told not to
CHARS_UTF8 = 1
PHONEMES_IPA = 0x02
# espeak-ng's punctuation that ends a clause with exactly one of these types (others carry extra flags, such as
# "say the punctuation's name", and end a clause with no type Piper keeps)
CLAUSE_ENDS = {",": ",", ".": ".", "?": "?", "!": "!", ":": ":", ";": ";", "\u2013": ";", "\u2014": ";"}
SENTENCE_ENDS = frozenset(".?!")
CLOSERS = frozenset("\"')]}»”’")  # read past after the clause's punctuation
PARAGRAPH = re.compile(r"\n[ \t\r\f\v]*\n\s*$")

_LOCK = threading.Lock()


@dataclass(frozen=True)
class Clause:
    phonemes: str  # IPA, as espeak-ng writes it
    end: str  # the clause's punctuation as Piper keeps it: one of , . ? ! : ; or ""
    sentence_end: bool
    text: str = ""  # the text the clause was read from (its punctuation and the spaces around it included)


class Espeak:
    """One loaded libespeak-ng; use :func:`espeak`."""

    def __init__(self) -> None:
        try:
            import espeakng_loader
        except ImportError as error:
            raise GGTTSError(f"espeak-ng is not installed ({error}); pip install espeakng-loader") from None
        try:
            self._lib = ctypes.cdll.LoadLibrary(espeakng_loader.get_library_path())
        except OSError as error:
            raise GGTTSError(f"cannot load espeak-ng's library: {error}") from None
        lib = self._lib
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_TextToPhonemes.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int]
        lib.espeak_TextToPhonemes.restype = ctypes.c_char_p
        data = str(espeakng_loader.get_data_path()).encode()
        if lib.espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 0, data, INITIALIZE_DONT_EXIT) < 0:
            raise GGTTSError(f"espeak-ng did not start with its data at {data.decode()}")
        self._voice: str | None = None  # a failed start shows at the first voice: espeak-ng then knows none

    def has_voice(self, voice: str) -> bool:
        """Whether espeak-ng knows ``voice`` (it becomes the voice in use if so)."""
        with _LOCK:
            if voice != self._voice:
                if self._lib.espeak_SetVoiceByName(voice.encode()) != 0:
                    return False
                self._voice = voice
        return True

    def clauses(self, text: str, voice: str) -> list[Clause]:
        """``text`` in ``voice`` (an espeak-ng voice name, e.g. ``en-us``) as its clauses' phonemes."""
        encoded = text.replace("\0", " ").encode("utf-8")  # a NUL would end espeak-ng's text there
        if not self.has_voice(voice):
            raise GGTTSError(f"espeak-ng has no voice '{voice}'")
        with _LOCK:
            buffer = ctypes.create_string_buffer(encoded)
            base = ctypes.addressof(buffer)
            pointer = ctypes.c_void_p(base)
            clauses = []
            carried = ""  # the character of this clause that the clause before read to know it had ended
            while pointer.value:
                start = pointer.value - base
                phonemes = self._lib.espeak_TextToPhonemes(ctypes.byref(pointer), CHARS_UTF8, PHONEMES_IPA)
                consumed = encoded[start : pointer.value - base if pointer.value else len(encoded)]
                consumed_text = carried + consumed.decode("utf-8", errors="ignore")
                carried = ""
                if pointer.value:  # espeak-ng has read one character of the next clause to end this one
                    consumed_text, carried = consumed_text[:-1], consumed_text[-1:]
                end = _clause_end(consumed_text)
                # a blank line ends a paragraph: a sentence without punctuation, as espeak-ng's CLAUSE_PARAGRAPH
                paragraph = bool(PARAGRAPH.search(consumed_text))
                phonemes_text = (phonemes or b"").decode("utf-8")
                sentence_end = paragraph or end in SENTENCE_ENDS
                # a clause that says nothing has no terminator, as espeak-ng's own terminator API reports it (after
                # a quoted '"..."' or '";"', say: piper-tts's ids end without that mark)
                mark = "" if paragraph or not phonemes_text else end
                clauses.append(Clause(phonemes_text, mark, sentence_end, consumed_text))
            # espeak-ng may hold one character it read past the text's last clause (the second "." of a text
            # ending ".."), which would begin the next text it is given ("dot go" for "Go"): it is read now, and
            # dropped
            empty = ctypes.create_string_buffer(b"")
            self._lib.espeak_TextToPhonemes(
                ctypes.byref(ctypes.c_void_p(ctypes.addressof(empty))), CHARS_UTF8, PHONEMES_IPA
            )
        return clauses


def _clause_end(consumed: str) -> str:
    """The clause punctuation at the end of the text a clause consumed (past spaces and closing quotes): the
    first mark of a run ("?!" is a question, as espeak-ng reads it); an ellipsis ends a clause with none."""
    tail = consumed.rstrip()
    while tail and (tail[-1] in CLOSERS or unicodedata.category(tail[-1]) == "Pf"):
        tail = tail[:-1].rstrip()
    if tail.endswith(("...", "\u2026")):
        return ""
    run = len(tail)
    while run > 0 and tail[run - 1] in CLAUSE_ENDS:
        run -= 1
    return CLAUSE_ENDS[tail[run]] if run < len(tail) else ""


_SHARED: list[Espeak] = []


def espeak() -> Espeak:
    """The process's espeak-ng (loaded on first use, once, whichever thread asks first)."""
    with _LOCK:
        if not _SHARED:
            _SHARED.append(Espeak())
        return _SHARED[0]
