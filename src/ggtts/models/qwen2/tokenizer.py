"""Byte-level BPE tokenizer rebuilt from a GGUF vocabulary (``tokenizer.ggml.model == "gpt2"``).

Special tokens (llama.cpp token types CONTROL and USER_DEFINED, e.g. ``<|im_start|>``, ``<|t_0.08|>``,
``<|968|>``)
are matched whole in the raw text, longest first. The rest is NFC-normalised (as Qwen2's tokenizer.json does),
split by the pre-tokenizer regex, mapped byte by byte to GPT-2's printable alphabet, and merged by merge rank.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Sequence

import regex

from ggtts.errors import GGUFError, InputError
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Tokenizer as K

# Pre-tokenizer regexes by llama.cpp's tokenizer.ggml.pre name.
PRE_TOKENIZERS: dict[str, str] = {
    "qwen2": (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
        r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    ),
}
SPECIAL_TYPES = (K.TYPE_CONTROL, K.TYPE_USER_DEFINED)


@functools.cache
def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (printable Latin-1 maps to itself)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


class BPETokenizer:
    def __init__(
        self,
        tokens: Sequence[str],
        merges: Sequence[str],
        token_types: Sequence[int] | None = None,
        *,
        pre: str = "qwen2",
    ) -> None:
        if pre not in PRE_TOKENIZERS:
            raise GGUFError(f"unsupported pre-tokenizer '{pre}'; supported: {', '.join(sorted(PRE_TOKENIZERS))}")
        self.tokens = list(tokens)
        self.token_to_id = {t: i for i, t in enumerate(self.tokens)}
        self.ranks: dict[tuple[str, str], int] = {}
        for rank, merge in enumerate(merges):
            left, sep, right = merge.partition(" ")
            if not sep:
                raise GGUFError(f"malformed BPE merge #{rank}: {merge!r}")
            self.ranks.setdefault((left, right), rank)
        types = list(token_types) if token_types is not None else [K.TYPE_NORMAL] * len(self.tokens)
        self.special = {t: i for i, (t, ty) in enumerate(zip(self.tokens, types, strict=True)) if ty in SPECIAL_TYPES}
        self.control_ids = frozenset(i for i, ty in enumerate(types) if ty == K.TYPE_CONTROL)
        self._pre = regex.compile(PRE_TOKENIZERS[pre])
        ordered = sorted(self.special, key=len, reverse=True)
        self._special_re = regex.compile("|".join(regex.escape(s) for s in ordered)) if ordered else None
        self._bytes = byte_to_unicode()
        self._unbytes = {c: b for b, c in self._bytes.items()}
        self._bpe = functools.lru_cache(maxsize=65536)(self._bpe_uncached)

    @classmethod
    def from_gguf(cls, gguf: GGUFFile) -> BPETokenizer:
        model = gguf.get(K.MODEL)
        if model != "gpt2":
            raise GGUFError(f"{gguf.path}: tokenizer model '{model}' is not byte-level BPE ('gpt2')")
        tokens, merges = _strings(gguf, K.TOKENS), _strings(gguf, K.MERGES)
        types = gguf.get(K.TOKEN_TYPE)
        if types is not None and (
            not isinstance(types, list)
            or len(types) != len(tokens)
            or not all(isinstance(t, int) and not isinstance(t, bool) for t in types)
        ):
            raise GGUFError(f"{gguf.path}: metadata '{K.TOKEN_TYPE}' must hold one integer per token ({len(tokens)})")
        try:
            return cls(tokens, merges, types, pre=str(gguf.get(K.PRE, "qwen2")))
        except GGUFError as e:
            raise GGUFError(f"{gguf.path}: {e}") from None

    def __len__(self) -> int:
        return len(self.tokens)

    # ---- encoding ------------------------------------------------------------------------------------------
    def _bpe_uncached(self, word: str) -> tuple[int, ...]:
        parts = list(word)
        while len(parts) > 1:
            best_rank, best_i = None, -1
            for i in range(len(parts) - 1):
                rank = self.ranks.get((parts[i], parts[i + 1]))
                if rank is not None and (best_rank is None or rank < best_rank):
                    best_rank, best_i = rank, i
            if best_rank is None:
                break
            left, right = parts[best_i], parts[best_i + 1]
            merged: list[str] = []
            i = 0
            while i < len(parts):  # merge every occurrence of this pair, left to right
                if i < len(parts) - 1 and parts[i] == left and parts[i + 1] == right:
                    merged.append(left + right)
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        try:
            return tuple(self.token_to_id[p] for p in parts)
        except KeyError as e:
            raise InputError(f"the vocabulary has no token for {e.args[0]!r}") from None

    def _encode_plain(self, text: str, out: list[int]) -> None:
        text = unicodedata.normalize("NFC", text)
        for piece in self._pre.findall(text):
            out.extend(self._bpe("".join(self._bytes[b] for b in piece.encode("utf-8"))))

    def encode(self, text: str, *, parse_special: bool = True) -> list[int]:
        """Token ids for ``text``; special tokens written in it are single ids when ``parse_special``."""
        ids: list[int] = []
        if not parse_special or self._special_re is None:
            self._encode_plain(text, ids)
            return ids
        pos = 0
        for m in self._special_re.finditer(text):
            if m.start() > pos:
                self._encode_plain(text[pos : m.start()], ids)
            ids.append(self.special[m.group()])
            pos = m.end()
        if pos < len(text):
            self._encode_plain(text[pos:], ids)
        return ids

    # ---- decoding ------------------------------------------------------------------------------------------
    def decode(self, ids: Sequence[int]) -> str:
        """Text for ``ids``; special tokens are written out as they are (``<|code_start|>``)."""
        out = bytearray()
        for i in ids:
            piece = self.tokens[i]
            if piece in self.special:
                out.extend(piece.encode("utf-8"))
            else:
                out.extend(self._unbytes.get(c, ord("?")) for c in piece)
        return out.decode("utf-8", errors="replace")


def _strings(gguf: GGUFFile, key: str) -> list[str]:
    values = gguf.get_list(key)
    if not values or not all(isinstance(v, str) for v in values):
        raise GGUFError(f"{gguf.path}: metadata '{key}' must be a non-empty list of strings")
    return values
