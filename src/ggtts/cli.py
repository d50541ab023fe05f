"""The ``ggtts`` command: a thin argparse layer over the public API."""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from ggtts.errors import GGTTSError

if TYPE_CHECKING:
    from ggtts.families.base import Family

from ggtts.flags import PROG
from ggtts.runtime.device import device_memory_error

MAX_LIST_ITEMS = 8  # metadata arrays longer than this are summarised by `info`
QUICK_EXIT = ("speak",)  # commands whose success ends the process without the interpreter's teardown (run)
SERVERS = ("serve", "wyoming")  # long-running: their threads wait as libgomp decides (runtime.threads)


def _fail(message: str, status: int = 1) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return status


# ---- info -----------------------------------------------------------------------------------------------------
def _format_value(value: Any) -> str:
    if isinstance(value, list):
        if len(value) > MAX_LIST_ITEMS:
            head = ", ".join(repr(v) for v in value[:MAX_LIST_ITEMS])
            return f"[{head}, ...] ({len(value)} items)"
        return "[" + ", ".join(repr(v) for v in value) + "]"
    return repr(value) if isinstance(value, str) else str(value)


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GiB"


def cmd_info(args: argparse.Namespace) -> int:
    from ggtts.api import resolve_model_path
    from ggtts.families import families, family_for
    from ggtts.gguf import GGUFFile

    # a built-in name is its file in the cache (built on first use, as ``-m kokoro`` builds it)
    g = GGUFFile(resolve_model_path(args.file))
    print(f"file: {g.path}")
    print(f"GGUF version: {g.version}")
    companion = [(f, c) for f in families() for c in f.companions if c.is_for(g)]
    side_file = [(f, f.side_files[g.architecture]) for f in families() if g.architecture in f.side_files]
    try:
        family = family_for(g)
    except GGTTSError as e:
        if companion:
            f, c = companion[0]
            why = f"a companion file of {f.name}: {c.help}; give it with --{c.option}"
        elif side_file:
            f, what = side_file[0]
            why = f"a {f.name} file: {what}"
        else:
            why = f"not supported by this ggtts: {str(e).removeprefix(f'{g.path}: ')}"
        print(f"architecture: {g.architecture}  ({why})")
        voices: list[str] = []
    else:
        print(f"architecture: {g.architecture}")
        print(f"family: {family.name} ({family.description})")
        print(f"capabilities: {family.describe_capabilities(g)}")
        voices = family.voices(g)
        print(f"voices ({len(voices)}): {', '.join(voices)}")
    print("metadata:")
    for key, value in g.metadata.items():
        if voices and value == voices:
            continue
        print(f"  {key} = {_format_value(value)}")
    infos = list(g.infos())
    by_type = Counter(i.type.name for i in infos)
    total = sum(i.n_bytes for i in infos)
    counts = ", ".join(f"{name} {n}" for name, n in sorted(by_type.items()))
    print(f"tensors: {len(infos)} ({counts})")
    print(f"tensor data: {_human_bytes(total)} ({total} bytes)")
    return 0


# ---- voices ---------------------------------------------------------------------------------------------------
def cmd_voices(args: argparse.Namespace) -> int:
    """The model's voices from its metadata (no weight is read), with what each name tells."""
    from ggtts.api import resolve_model_path
    from ggtts.families import family_for
    from ggtts.gguf import GGUFFile

    gguf = GGUFFile(resolve_model_path(args.model))
    family = family_for(gguf)
    voices = family.voices(gguf)
    if not voices:
        print(f"{gguf.path}: {family.name} has no voices to choose from; leave -v out")
        return 0
    width = max(len(v) for v in voices)
    for voice in voices:
        traits = family.voice_traits(voice)
        print(f"{voice:<{width}}  {traits.get('language', '-'):<20}  {traits.get('gender', '-')}".rstrip())
    blends = " (or a blend: 'a:0.6,b:0.4')" if family.capabilities.blending else ""
    more = "; files given at load add more" if family.more_voices_at_load else ""
    print(f"{len(voices)} voices of {gguf.path}{more}; choose one with -v{blends}", file=sys.stderr)
    return 0


def cmd_voice_create(args: argparse.Namespace) -> int:
    """A cloned voice for a Qwen3-TTS Base model: the speaker embedding of a recording (and with --text, its
    codes for the in-context prompt), in a voice file."""
    from ggtts.api import resolve_model_path
    from ggtts.families.qwen3tts.voices import create_voice
    from ggtts.fsutil import check_writable

    check_writable(args.output)
    out = create_voice(resolve_model_path(args.model), args.reference, args.output, args.name, args.text, args.mmproj)
    name = args.name or out.name.removesuffix(".gguf")
    print(f"{PROG}: wrote {out}; put it beside the model and speak with -v {name}", file=sys.stderr)
    return 0


# ---- cache ----------------------------------------------------------------------------------------------------
def cmd_cache(args: argparse.Namespace) -> int:
    """Where ggtts keeps what it builds (converted built-in models, Whisper's weights, misaki's lexicons), what is
    there, and how large; ``--path``: the folder alone, for scripts."""
    from ggtts.fsutil import cache_dir

    folder = cache_dir()
    if args.path:
        print(folder)
        return 0
    entries = sorted(e for e in folder.iterdir() if not e.name.startswith(".")) if folder.is_dir() else []
    print(f"cache: {folder} (set GGTTS_HOME to move it)")
    if not entries:
        print("  empty: built-in models are converted into it on first use")
        return 0
    total = 0
    for entry in entries:
        size = _tree_bytes(entry)
        total += size
        print(f"  {entry.name + ('/' if entry.is_dir() else ''):<44} {_human_bytes(size):>10}")
    print(f"  {'total':<44} {_human_bytes(total):>10}")
    return 0


def _tree_bytes(path: Path) -> int:
    if path.is_symlink() or not path.is_dir():
        return path.lstat().st_size
    return sum(f.lstat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


# ---- speak ----------------------------------------------------------------------------------------------------
def _decode_utf8(data: bytes, source: str) -> str:
    """``data`` decoded as UTF-8, strictly; else one line naming ``source`` and the first bad byte's offset."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise GGTTSError(
            f"{source}: not UTF-8 text (byte 0x{data[e.start]:02x} at byte offset {e.start} is invalid)"
        ) from None


def _read_text(args: argparse.Namespace) -> str:
    from ggtts.families.base import check_unicode

    if args.text is not None and args.file is not None:
        raise GGTTSError("give the text either as an argument or with -f, not both")
    if args.file is not None:
        path = Path(args.file)
        try:
            return _decode_utf8(path.read_bytes(), str(path))
        except OSError as e:
            raise GGTTSError(f"{path}: cannot read text ({e.strerror})") from None
    if args.text is not None:
        return check_unicode(str(args.text))  # undecodable argv bytes arrive as lone surrogates
    if sys.stdin.isatty():
        raise GGTTSError("no text given: pass it as an argument, with -f FILE, or on standard input")
    stdin = getattr(sys.stdin, "buffer", None)  # bytes where there are any: decoded strictly, not by the locale
    return sys.stdin.read() if stdin is None else _decode_utf8(stdin.read(), "standard input")


def family_options(args: argparse.Namespace) -> dict[str, Any]:
    """The per-call family options given on the command line (:func:`ggtts.flags.given`)."""
    from ggtts.flags import PER_CALL, given

    return given(args, PER_CALL)


def load_options(
    args: argparse.Namespace, family: Family | None = None, options: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The load options given and the device (:func:`ggtts.flags.load_options`), and the companion files of
    ``family`` named among ``options``."""
    from ggtts import flags

    chosen = flags.load_options(args, lambda note: print(f"{PROG}: {note}", file=sys.stderr))
    if family is not None:
        chosen.update(_companion_options(family, options or {}))
    return chosen


def _companion_options(family: Family, options: dict[str, Any]) -> dict[str, Any]:
    """The options naming the model's companion files (``--vocoder``, ``--codec``, ``--talker``): they go to the
    loader too, which needs them where the companion is not beside the model."""
    return {c.option: options[c.option] for c in family.companions if options.get(c.option) is not None}


def cmd_speak(args: argparse.Namespace) -> int:
    import ggtts
    from ggtts import flags
    from ggtts.api import resolve_model_path
    from ggtts.audio import Audio, check_output_suffix, merge_words, wav_header
    from ggtts.captions import check_caption_suffix, save_timestamps
    from ggtts.families import family_for
    from ggtts.families.base import import_target
    from ggtts.fsutil import check_writable
    from ggtts.gguf import GGUFFile

    if args.output != "-":  # before any work
        check_output_suffix(args.output)
        check_writable(args.output)
    if args.timestamps is not None:
        check_caption_suffix(args.timestamps)
        check_writable(args.timestamps)
    text = _read_text(args)
    options = family_options(args)
    gguf = GGUFFile(resolve_model_path(args.model))  # metadata only: no weight is read
    family = family_for(gguf)
    family.check_request(text, args.speed, options)  # before the load, so a mistake costs no load
    family.check_voice(args.voice, gguf)
    if args.timestamps is not None and not family.capabilities.timestamps:
        raise GGTTSError(f"{family.name} gives no word timestamps; leave out --timestamps")
    # the text read while torch is imported and the model loads (choosing the device imports torch: after this)
    given_at_load = flags.given(args, flags.LOAD)
    family.check_load_options(given_at_load)  # (a lexicon file that cannot be read costs no load either)
    lexicon = given_at_load.get("lexicon")
    ahead = import_target(family.read_ahead)(gguf, text, options, lexicon) if family.read_ahead is not None else {}
    model = ggtts.load(args.model, **load_options(args, family, options), **ahead)
    if args.output == "-":
        if args.float:
            raise GGTTSError("--float needs a file: the stream on standard output is 16-bit PCM WAV")
        chunks = model.stream(text, voice=args.voice, speed=args.speed, **options)
        first = next(chunks, None)  # bad input fails here, before a single byte reaches standard output
        words: list[Any] = []
        _to_stdout(wav_header(model.sample_rate, None))
        for chunk in itertools.chain([] if first is None else [first], chunks):
            _to_stdout(chunk.pcm16())
            words += chunk.words
        if args.timestamps is not None:
            save_timestamps(merge_words(words), args.timestamps)
        return 0
    audio: Audio = model.synthesize(text, voice=args.voice, speed=args.speed, **options)
    path = audio.save(args.output, float_wav=args.float)
    print(f"{PROG}: wrote {path} ({audio.duration:.2f} s at {audio.sample_rate} Hz)", file=sys.stderr)
    if args.timestamps is not None:
        stamps = save_timestamps(audio.words, args.timestamps)
        print(f"{PROG}: wrote {stamps} ({len(audio.words)} words)", file=sys.stderr)
    return 0


def _to_stdout(data: bytes) -> None:
    """``data`` written to standard output and flushed; a write that fails (a full disk, say) is one GGTTSError,
    with standard output sent nowhere from then on, so that the exit does not fail again on what is left. A closed
    pipe stays a BrokenPipeError (``_main`` ends quietly on it)."""
    try:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    except BrokenPipeError:
        raise
    except OSError as e:
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise GGTTSError(f"standard output: cannot write the audio ({e.strerror or e})") from None


# ---- chat -----------------------------------------------------------------------------------------------------
def cmd_chat(args: argparse.Namespace) -> int:
    import ggtts
    from ggtts.api import resolve_model_path
    from ggtts.audio import Audio, check_output_suffix
    from ggtts.families import family_for
    from ggtts.families.qwen3omni import audio_encoder_beside
    from ggtts.fsutil import check_writable
    from ggtts.gguf import GGUFFile

    if args.output is not None:  # before any work
        check_output_suffix(args.output)
        check_writable(args.output)
    if args.audio is None and not (args.text or "").strip():
        raise GGTTSError("give the question: --audio FILE, --text TEXT, or both")
    question = None
    if args.audio is not None:  # decoded and checked now: a file that cannot be heard costs no load
        from ggtts.models.qwen3omni_audio.features import read_audio

        question = read_audio(args.audio)
    options = family_options(args)
    if options.pop("mode", "chat") != "chat":
        raise GGTTSError("ggtts chat answers questions (mode chat); to say a text as written, use ggtts speak")
    for name in ("system", "max_reply_tokens"):
        if getattr(args, name) is not None:
            options[name] = getattr(args, name)
    gguf = GGUFFile(resolve_model_path(args.model))  # metadata only: no weight is read
    family = family_for(gguf)
    if not family.capabilities.chat:
        raise GGTTSError(f"{gguf.path}: {family.name} speaks text; it does not answer questions (ggtts speak)")
    family.check_options(options)
    family.check_voice(args.voice, gguf)
    if question is not None and options.get("mmproj") is None and audio_encoder_beside(Path(gguf.path)) is None:
        raise GGTTSError(
            f"{gguf.path}: to hear --audio the model needs its audio encoder: put the mmproj GGUF beside it or name "
            "it with --mmproj"
        )
    model = ggtts.load(args.model, **load_options(args, family, options))
    reply = model.chat(args.text or "", audio=question, voice=args.voice, speak=args.output is not None, **options)
    print(reply.text)
    if args.output is not None:
        parts = list(reply.audio)
        if not parts:
            raise GGTTSError("the talker ended the answer before any audio: nothing written")
        audio = Audio.concatenate(parts)
        path = audio.save(args.output)
        print(f"{PROG}: wrote {path} ({audio.duration:.2f} s at {audio.sample_rate} Hz)", file=sys.stderr)
    return 0


# ---- convert --------------------------------------------------------------------------------------------------
def cmd_convert(args: argparse.Namespace) -> int:
    from ggtts.families import convert
    from ggtts.fsutil import check_writable

    check_writable(args.output)  # before any work
    out = convert(args.family, [Path(s) for s in args.sources], Path(args.output), args.type)
    print(f"{PROG}: wrote {out}", file=sys.stderr)
    return 0


# ---- decode ---------------------------------------------------------------------------------------------------
def cmd_decode(args: argparse.Namespace) -> int:
    from ggtts.families import families
    from ggtts.families.base import import_target
    from ggtts.fsutil import check_writable
    from ggtts.gguf import GGUFFile

    check_writable(args.output)  # before any work
    arch = GGUFFile(args.vocoder).architecture
    decoders = {f.decodes_with: f.decoder for f in families() if f.decoder and f.decodes_with}
    if arch not in decoders:
        known = ", ".join(sorted(decoders)) or "none"
        raise GGTTSError(f"{args.vocoder}: no family here decodes codes with a '{arch}' file (decoders: {known})")
    from ggtts.runtime.device import resolve_device

    device = resolve_device(args.device)
    audio = import_target(decoders[arch])(args.vocoder, args.codes, args.output, device=device)
    print(f"{PROG}: wrote {args.output} ({audio.duration:.2f} s at {audio.sample_rate} Hz)", file=sys.stderr)
    return 0


# ---- serve / bench / eval / parity: filled in by their modules ---------------------------------------
def _delegate(module: str, func: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        import importlib

        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name and e.name.startswith("ggtts"):
                raise GGTTSError(f"'{args.command}' is not available in this build of ggtts") from None
            raise GGTTSError(f"'{args.command}' needs the Python package '{e.name}', which is not installed") from None
        result: int = getattr(mod, func)(args)
        return result

    return run


# ---- parser ---------------------------------------------------------------------------------------------------
def _speed(value: str) -> float:
    from ggtts.api import check_speed

    try:
        return check_speed(value)
    except GGTTSError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


class _Parser(argparse.ArgumentParser):
    """A bad argument is one line naming it and where the usage is, not the whole usage block first."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from ggtts import __version__
    from ggtts.api import DEFAULT_MODEL
    from ggtts.families import converter_names
    from ggtts.flags import LOAD, PER_CALL, add_flags
    from ggtts.gguf.write import OutType
    from ggtts.runtime.threads import add_threads_argument

    p = _Parser(prog=PROG, description="Local text-to-speech with GGUF models.")
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("speak", help="speak text into a WAV file (or standard output)")
    s.add_argument("text", nargs="?", help="text to speak (default: -f FILE or standard input)")
    s.add_argument("-m", "--model", default=None, help=f"GGUF file or built-in name (default: {DEFAULT_MODEL})")
    s.add_argument("-v", "--voice", default=None, help="voice name, or a blend like 'a:0.6,b:0.4'")
    s.add_argument("-s", "--speed", type=_speed, default=1.0, help="speaking rate, 0.25 to 4.0 (default 1.0)")
    s.add_argument("-o", "--output", default="out.wav", help="output file (.wav/.flac/.ogg/.mp3), '-' for stdout")
    s.add_argument("-f", "--file", default=None, help="read the text from this UTF-8 file")
    s.add_argument("--float", action="store_true", help="write 32-bit float WAV instead of 16-bit PCM")
    s.add_argument(
        "--timestamps", default=None, metavar="FILE", help="also write word timestamps (.json, .srt or .vtt captions)"
    )
    add_flags(s, PER_CALL)
    add_flags(s, LOAD)
    add_threads_argument(s)
    s.set_defaults(func=cmd_speak)

    h = sub.add_parser("chat", help="ask a question (audio, text or both); print the answer, speak it to a file")
    h.add_argument("-m", "--model", default=None, help="the model: a Qwen3-Omni thinker GGUF")
    h.add_argument("--audio", default=None, metavar="FILE", help="the question as a sound file (WAV, FLAC, OGG, MP3)")
    h.add_argument("--text", default=None, help="the question as text (after the audio, when both are given)")
    h.add_argument("-o", "--output", default=None, help="also speak the answer into this file (.wav/.flac/.ogg/.mp3)")
    h.add_argument("-v", "--voice", default=None, help="the voice that speaks the answer")
    h.add_argument("--system", default=None, help="the thinker's system prompt")
    h.add_argument("--max-reply-tokens", type=int, default=None, help="most tokens in the answer (default 1024)")
    add_flags(h, PER_CALL)
    add_flags(h, LOAD)
    add_threads_argument(h)
    h.set_defaults(func=cmd_chat)

    c = sub.add_parser("convert", help="convert an upstream checkpoint to GGUF")
    c.add_argument("family", help=f"which converter: {', '.join(converter_names())}")
    c.add_argument("sources", nargs="+", help="upstream files (weights, config, voices)")
    c.add_argument("-o", "--output", required=True, help="output .gguf file")
    c.add_argument(
        "--type", default="f32", choices=[t.value for t in OutType], help="stored type of the large weight matrices"
    )
    c.set_defaults(func=cmd_convert)

    o = sub.add_parser("voices", help="list a model's voices, with the language and gender their names give")
    o.add_argument("-m", "--model", default=None, help=f"GGUF file or built-in name (default: {DEFAULT_MODEL})")
    o.set_defaults(func=cmd_voices)

    vc = sub.add_parser("voice", help="make a voice: clone one from a recording (Qwen3-TTS Base models)")
    vsub = vc.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = vsub.add_parser("create", help="a voice file from a few seconds of one voice speaking")
    create.add_argument("reference", help="the recording (WAV, FLAC, OGG or MP3; 1-120 s)")
    create.add_argument("-m", "--model", required=True, help="the Qwen3-TTS Base model (its mmproj beside it)")
    create.add_argument("-o", "--output", required=True, help="the voice file (.gguf); put it beside the model")
    create.add_argument("--name", help="the voice's name for -v (default: the output file's name)")
    create.add_argument("--text", help="what is said in the recording: the voice then prompts the model with the "
                        "recording in context (upstream's default; closer to the voice); without it, the speaker "
                        "embedding alone")  # fmt: skip
    create.add_argument("--mmproj", help="the model's mmproj file, where it is not beside the model")
    create.set_defaults(func=cmd_voice_create)

    i = sub.add_parser("info", help="describe a GGUF file, or a built-in model (where its file is, what it holds)")
    i.add_argument("file", help=f"a .gguf file or the built-in name '{DEFAULT_MODEL}'")
    i.set_defaults(func=cmd_info)

    k = sub.add_parser("cache", help="show where ggtts keeps the models it builds, and what is there")
    k.add_argument("--path", action="store_true", help="print only the cache folder")
    k.set_defaults(func=cmd_cache)

    from ggtts.server import add_arguments as add_serve_arguments  # light: FastAPI loads only to serve
    from ggtts.server import add_wyoming_arguments

    v = sub.add_parser("serve", help="run the OpenAI-compatible HTTP server")
    add_serve_arguments(v)
    add_threads_argument(v)
    v.set_defaults(func=_delegate("ggtts.server.cli", "run"))

    w = sub.add_parser("wyoming", help="serve the models over the Wyoming protocol (Home Assistant)")
    add_wyoming_arguments(w)
    add_threads_argument(w)
    w.set_defaults(func=_delegate("ggtts.server.cli", "run_wyoming"))

    b = sub.add_parser("bench", help="measure speed against installed peers")
    b.add_argument("-m", "--model", default=None, help=f"the model (default: {DEFAULT_MODEL}); families with a "
                   "benchmark: kokoro (the others' are scripts in benchmarks/)")  # fmt: skip
    b.add_argument("--text", default=None, help="the text to speak (default: a paragraph of about 20 s)")
    b.add_argument("--against", default=None, help="peers to run beside ggtts, comma-separated: onnx "
                   "(kokoro-onnx), reference (hexgrad's kokoro), ggtts's own variants (bf16, compiled, "
                   "bf16-compiled, fast, bf16-compiled-fast, direct), or none (default: onnx,reference, each where "
                   "it can run; one named here that cannot is an error)")  # fmt: skip
    b.add_argument("--runs", type=int, default=3, help="timed runs per peer, after a warm-up (default 3)")
    b.add_argument("--json", action="store_true", help="print the report as JSON")
    b.add_argument("--plot", default=None, metavar="PNG", help="also draw the figures to this image")
    b.set_defaults(func=_delegate("ggtts.measure.bench", "run"))

    e = sub.add_parser("eval", help="measure intelligibility with Whisper (word error rate)")
    e.add_argument("sentences", nargs="?", default=None, help="file with one sentence per line")
    e.add_argument("-m", "--model", default=None, help=f"the model (default: {DEFAULT_MODEL})")
    e.add_argument("-v", "--voice", default=None, help="the voice (default: the model's default voice)")
    e.add_argument("--whisper", default="base", choices=["base", "tiny.en"], help="Whisper model that listens "
                   "(faster-whisper; default base)")  # fmt: skip
    e.add_argument("--json", action="store_true", help="print the report as JSON")
    add_flags(e, LOAD)
    e.set_defaults(func=_delegate("ggtts.measure.eval", "run"))

    d = sub.add_parser("decode", help="turn audio codes into audio with a codec GGUF")
    d.add_argument(
        "codes",
        nargs="?",
        default="-",
        help="codes, a file, or - for stdin: WavTokenizer's integers or <|N|> tokens; Qwen3-Omni's one frame per line",
    )
    d.add_argument(
        "--vocoder",
        required=True,
        metavar="CODEC.gguf",
        help="the codec GGUF that decodes the codes (wavtokenizer-dec, or a Qwen3-Omni talker holding code2wav)",
    )
    d.add_argument("-o", "--output", default="out.wav", help="audio file to write (.wav, .flac ...; default out.wav)")
    d.add_argument("--device", default="auto", help="torch device: auto (CUDA where torch has it, else cpu), cpu, cuda")
    d.set_defaults(func=cmd_decode)

    from ggtts.batch.cli import add_arguments as add_batch_arguments

    t = sub.add_parser("batch", help="speak many texts into many files, resumably (locally or on Ray)")
    t.add_argument("-m", "--model", default=None, help=f"GGUF file or built-in name (default: {DEFAULT_MODEL})")
    t.add_argument("-v", "--voice", default=None, help="voice for items that name none")
    t.add_argument("-s", "--speed", type=_speed, default=1.0, help="speed for items that give none (default 1.0)")
    add_batch_arguments(t)
    add_flags(t, PER_CALL, skip=("progress",))
    add_flags(t, LOAD)
    t.set_defaults(func=_delegate("ggtts.batch.cli", "run"))

    r = sub.add_parser("parity", help="compare a model family with its upstream reference")
    r.add_argument("family")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=_delegate("ggtts.measure.parity", "run"))
    return p


def main(argv: Sequence[str] | None = None) -> int:
    return _main(build_parser().parse_args(argv))


def _main(args: argparse.Namespace) -> int:
    try:
        from ggtts.runtime import threads

        # batch's --threads is each worker's; its workers inherit how threads wait
        threads.configure(
            None if args.command == "batch" else getattr(args, "threads", None), serving=args.command in SERVERS
        )
        status: int = args.func(args)
        return status
    except GGTTSError as e:
        return _fail(str(e))
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except BrokenPipeError:
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as e:  # a bug, not bad input: still one line, with the traceback on request
        memory = device_memory_error(e, f"ggtts {args.command}", "use a quantized file, shorter input, or --device cpu")
        if memory is not None:
            return _fail(str(memory))
        if os.environ.get("GGTTS_DEBUG"):
            raise
        return _fail(f"internal error: {type(e).__name__}: {e} (set GGTTS_DEBUG=1 for the traceback)")


def run() -> NoReturn:
    """The ``ggtts`` command: :func:`main`, then the process's exit. Everything alive is first frozen out of the
    garbage collector's reach (``gc.freeze``): the interpreter's last collections at exit then skip torch's, spaCy's
    and the model's objects, which took 0.3-0.5 s of a short ``ggtts speak`` (the operating system takes the
    memory back; exit handlers and finalizers still run). A ``speak`` that succeeded, with no child process left,
    ends at once once its output is flushed (:func:`_quick_exit`)."""
    args = build_parser().parse_args()
    status = _main(args)
    gc.freeze()
    if status == 0 and args.command in QUICK_EXIT:
        _quick_exit()
    sys.exit(status)


def _quick_exit() -> None:
    """End the process now, skipping the interpreter's teardown of every module (torch's included: 0.10-0.15 s of
    a 3.5-4 s cold ``ggtts speak`` on a 2-core AMD EPYC), once standard output and error and the logs are flushed.
    Returns instead where that cannot be done cleanly: output that will not flush (the normal exit reports it),
    or a child process still running (the normal exit's handlers stop it)."""
    import logging

    if "multiprocessing" in sys.modules:
        import multiprocessing

        if multiprocessing.active_children():
            return
    for stream in (sys.stdout, sys.stderr):  # None where the descriptor was closed as the process started
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a pipe gone, a stream closed
            return
    logging.shutdown()
    os._exit(0)


if __name__ == "__main__":
    run()
