"""The speech server: an OpenAI-compatible HTTP API with streaming, and a web page.

``serve`` loads the models and runs uvicorn; ``add_arguments``/``main`` give ``ggtts serve`` its options.
FastAPI and uvicorn are imported only when the server starts, so the rest of ggtts works without them.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ggtts.api import DEFAULT_MODEL
from ggtts.errors import GGTTSError, InputError
from ggtts.flags import LOAD, PER_CALL, add_flags, family_flags
from ggtts.runtime.device import device_memory_error
from ggtts.runtime.threads import add_threads_argument, models_on_their_threads
from ggtts.runtime.threads import configure as configure_threads
from ggtts.server.settings import (
    API_KEY_ENV,
    DEFAULT_HOST,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_INPUT_CHARS,
    DEFAULT_MAX_QUEUE,
    DEFAULT_PORT,
    DEFAULT_REQUEST_TIMEOUT_S,
    DEFAULT_SEND_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    DEFAULT_WYOMING_URI,
    LOOPBACK_HOSTS,
    ServerSettings,
    allowed_host_names,
)

if TYPE_CHECKING:
    from ggtts.api import TTSModel

log = logging.getLogger("ggtts.server")
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})
# what a server told that a model does not fit in the GPU's memory can do
LOAD_ADVICE = "load fewer models or copies (--replicas), fewer streams together (--parallel), or a quantized file"
ANY_HOST = "*"


def host_names(host: str, allowed: Sequence[str] | None) -> frozenset[str] | None:
    """The Host header names a server bound to ``host`` answers to (None: any).

    By default the loopback names and the bound address; a server bound to every interface answers to any
    name unless ``allowed`` says which (it is reachable from the network anyway: give it an API key).
    ``allowed`` adds names; ``*`` among them accepts any.
    """
    extra = [name.strip() for item in allowed or () for name in item.split(",") if name.strip()]
    if ANY_HOST in extra or (host in WILDCARD_HOSTS and not extra):
        return None
    return allowed_host_names(host, extra)


def parse_model_spec(spec: str) -> tuple[str, str]:
    """``name=path``, a path (named by its stem) or the built-in ``kokoro`` -> (name, what to load)."""
    name, sep, target = spec.partition("=")
    if sep:
        name, target = name.strip(), target.strip()
        if not name or not target:
            raise GGTTSError(f"model '{spec}': write NAME=PATH, e.g. {DEFAULT_MODEL}=~/models/{DEFAULT_MODEL}.gguf")
        return name, target
    if spec == DEFAULT_MODEL:
        return DEFAULT_MODEL, DEFAULT_MODEL
    return Path(spec).stem, spec


def model_names(specs: Sequence[str]) -> list[tuple[str, str]]:
    """The (name, source) pairs of ``specs``; the default model when none; an error for a name used twice."""
    pairs = [parse_model_spec(s) for s in specs] or [(DEFAULT_MODEL, DEFAULT_MODEL)]
    seen: dict[str, str] = {}
    for name, source in pairs:
        if name in seen:
            raise GGTTSError(f"two models are named '{name}' ({seen[name]} and {source}); name them with NAME=PATH")
        seen[name] = source
    return pairs


def load_models(
    specs: Sequence[str], options: Mapping[str, Any] | None = None, replicas: int = 1
) -> dict[str, list[TTSModel]]:
    """Load and warm up ``replicas`` copies of each model. ``options`` (``precision``, ``compile``): with one
    model, all go to its loader, which refuses one its family does not take; with several, each model gets those
    its family takes (:func:`options_per_model`), all checked before any model loads."""
    from ggtts.api import load

    named = model_names(specs)
    own = options_per_model(named, options or {})
    models: dict[str, list[TTSModel]] = {}
    for name, source in named:
        copies = models.setdefault(name, [])
        for copy in range(replicas):
            which = f" (copy {copy + 1} of {replicas})" * (replicas > 1)
            log.info("loading model '%s' from %s%s", name, source, which)
            try:
                model = load(None if source == DEFAULT_MODEL else source, **own[name])
                copies.append(model)
                try:
                    model.warm_up()  # the first request pays neither for the text frontend nor for compiling
                except GGTTSError as exc:  # a request that needs what failed will say so; the others can be served
                    log.warning("could not warm up model '%s' (%s): %s", name, source, exc)
            except Exception as exc:  # (a model that does not fit would fail every request: the server stops here)
                error = device_memory_error(exc, f"loading model '{name}'{which}", LOAD_ADVICE)
                if error is None:
                    raise
                raise error from None
    return models


def options_per_model(named: Sequence[tuple[str, str]], options: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each served model's load options. Several models of different families share one command line, so a
    family's own option (Kokoro's ``compile``, OuteTTS's ``parallel`` or ``speaker``) goes to the models whose
    family takes it, checked there (from their files' metadata, before any model loads); one that no served model
    takes is refused; each model's are checked against the device it loads on too. One model gets them all (its
    loader says which it does not take), as does a file that does not open (its loader says why)."""
    from ggtts.api import resolve_model_path
    from ggtts.families import family_for
    from ggtts.families.base import refuse_untaken_load_options
    from ggtts.gguf import GGUFFile
    from ggtts.runtime.device import AUTO, resolve_device

    if len(named) < 2:
        return {name: dict(options) for name, _ in named}
    families = {}
    for name, source in named:
        with contextlib.suppress(GGTTSError):
            families[name] = family_for(GGUFFile(resolve_model_path(None if source == DEFAULT_MODEL else source)))
    if len(families) == len(named):  # (a file that does not open: its loader's error is the one to see)
        refuse_untaken_load_options(options, list(families.values()), "no model served")
    own = {}
    for name, _ in named:
        family = families.get(name)
        if family is None:
            own[name] = dict(options)
            continue
        try:
            own[name] = family.checked_load_options(options, resolve_device(options.get("device", AUTO)))
        except InputError as e:
            raise InputError(f"model '{name}': {e}") from None
    return own


def run(models: Mapping[str, TTSModel | Sequence[TTSModel]], settings: ServerSettings, host: str, port: int) -> None:
    """Serve already loaded models until interrupted."""
    try:
        import uvicorn

        from ggtts.server.app import create_app
        from ggtts.server.connections import guarded_protocols, prepare_for_connections
    except ImportError as exc:
        raise GGTTSError(
            f"the server needs FastAPI and uvicorn ({exc.name} is missing): pip install 'ggtts[server]'"
        ) from None
    _configure_logging()
    if host not in LOOPBACK_HOSTS and settings.api_key is None:
        log.warning("listening on %s without an API key: anyone who can reach it can use it", host)
    prepare_for_connections(settings.max_connections)
    uvicorn.run(
        create_app(models, settings),
        host=host,
        port=port,
        log_level="info",
        access_log=True,
        ws_max_size=settings.max_body_bytes,  # a WebSocket message is refused as it passes the size of any valid one
        **guarded_protocols(settings),  # uvicorn's HTTP/1.1 and WebSocket protocols with the connection limits
    )


def serve(
    model_specs: Sequence[str],
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    api_key: str | None = None,
    max_queue: int = DEFAULT_MAX_QUEUE,
    max_input_chars: int = DEFAULT_MAX_INPUT_CHARS,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    allowed_hosts: Sequence[str] | None = None,
    load_options: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None,
    fast_start: bool = False,
    send_timeout_s: float = DEFAULT_SEND_TIMEOUT_S,
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    threads_per_model: bool = False,
    replicas: int = 1,
) -> None:
    """Load ``model_specs`` once (see ``parse_model_spec``) with ``load_options`` and serve them; the API key
    falls back to the ``GGTTS_API_KEY`` environment variable; ``allowed_hosts`` see :func:`host_names`;
    ``fast_start``: streamed requests to models that have the option start fast; ``send_timeout_s``,
    ``request_timeout_s``, ``max_connections``: the connections' bounds (see :class:`ServerSettings`).
    ``load_options`` may be a function giving them, called once the settings are checked (the command line's
    device choice loads torch: a bad limit is told in a moment). ``threads_per_model``: torch's threads go to the
    models' own threads, the main thread keeps one (:func:`ggtts.runtime.threads.models_on_their_threads`; the
    commands do this). ``replicas``: copies of each model, each on its own thread (requests at once per model).
    """
    settings = ServerSettings(
        api_key=api_key if api_key is not None else os.environ.get(API_KEY_ENV),
        max_queue=max_queue,
        max_input_chars=max_input_chars,
        timeout_s=timeout_s,
        allowed_hosts=host_names(host, allowed_hosts),
        fast_start=fast_start,
        send_timeout_s=send_timeout_s,
        request_timeout_s=request_timeout_s,
        max_connections=max_connections,
        replicas=replicas,
    )
    model_names(model_specs)  # refuse duplicate names before loading anything
    options = load_options() if callable(load_options) else load_options
    if threads_per_model:
        settings = dataclasses.replace(settings, model_threads=models_on_their_threads())
    run(load_models(model_specs, options, settings.replicas), settings, host, port)


def _configure_logging() -> None:
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s:     %(name)s: %(message)s")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``ggtts serve`` and ``python -m ggtts.server`` (``serve_from_args`` reads them)."""
    _add_model_argument(parser)
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST})")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    parser.add_argument(
        "--api-key",
        default=None,
        help=f"require 'Authorization: Bearer KEY' on the API (default: ${API_KEY_ENV})",
    )
    parser.add_argument(
        "--allowed-hosts",
        action="append",
        default=None,
        metavar="NAMES",
        help="host names the server answers to besides the loopback names and --host, comma-separated "
        "('*': any); default: only those, or any when --host is 0.0.0.0",
    )
    _add_limits(parser)


def add_wyoming_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``ggtts wyoming`` (``wyoming_from_args`` reads them)."""
    _add_model_argument(parser)
    parser.add_argument(
        "--uri",
        default=DEFAULT_WYOMING_URI,
        help="where to listen: tcp://HOST:PORT, unix://PATH or stdio:// "
        f"(default {DEFAULT_WYOMING_URI}; Home Assistant finds it by host and port)",
    )
    _add_limits(parser)


def _add_model_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-m",
        "--model",
        action="append",
        default=None,
        metavar="MODEL",
        help=f"a .gguf file, NAME=PATH, or a built-in name ('{DEFAULT_MODEL}', the default); repeat to serve several",
    )


def _add_limits(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--replicas",
        type=int,
        default=1,
        metavar="N",
        help="copies of each model, each on its own thread: up to N requests per model at once (N times its memory; "
        "a GPU runs them side by side, a CPU shares its cores among them; default 1)",
    )
    parser.add_argument(
        "--max-queue",
        type=int,
        default=DEFAULT_MAX_QUEUE,
        help=f"requests that may wait per model before answering 503 (default {DEFAULT_MAX_QUEUE})",
    )
    parser.add_argument(
        "--max-input-chars",
        type=int,
        default=DEFAULT_MAX_INPUT_CHARS,
        help=f"longest input accepted, in characters (default {DEFAULT_MAX_INPUT_CHARS})",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help=f"seconds of synthesis a request may take, queueing included; the time its client takes to read is "
        f"not counted (default {DEFAULT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--send-timeout",
        type=float,
        default=DEFAULT_SEND_TIMEOUT_S,
        help="seconds a client may take none of the audio sent to it before it is cut off; one that plays the "
        f"audio as it arrives is never near it (default {DEFAULT_SEND_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--request-timeout",
        type=float,
        default=DEFAULT_REQUEST_TIMEOUT_S,
        help="seconds a connection has to send a whole request (a Wyoming event), from when it opens or its last "
        f"answer ends; silent and trickling clients are closed (default {DEFAULT_REQUEST_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=DEFAULT_MAX_CONNECTIONS,
        help=f"open connections served at once; more are refused at once (default {DEFAULT_MAX_CONNECTIONS})",
    )
    add_flags(parser, LOAD)
    fast = family_flags(PER_CALL).get("fast_start")
    parser.add_argument(
        "--fast-start",
        action="store_true",
        help=f"streamed requests to models with the fast_start option ({', '.join(fast.owners if fast else ())}) "
        "get the first half second or so of a first clause of 1 s or more before the rest of it is rendered (first "
        "audio sooner; those first frames are an approximation, rendered on their own); and text streamed in (the live "
        "socket, Wyoming's streaming synthesis) is spoken from its first clause however short, for every model "
        '("Sure," once the next word begins, as an utterance of its own); whole files are not affected',
    )


def load_options(args: argparse.Namespace) -> dict[str, Any]:
    """The load options given (from the family records: ``--device``, ``--precision``, ...), for every model."""
    from ggtts import flags

    return flags.load_options(args, lambda note: print(f"ggtts: {note}", file=sys.stderr))


def serve_from_args(args: argparse.Namespace) -> None:
    serve(
        args.model or [],
        host=args.host,
        port=args.port,
        api_key=args.api_key,
        max_queue=args.max_queue,
        max_input_chars=args.max_input_chars,
        timeout_s=args.timeout,
        allowed_hosts=args.allowed_hosts,
        load_options=functools.partial(load_options, args),
        fast_start=args.fast_start,
        send_timeout_s=args.send_timeout,
        request_timeout_s=args.request_timeout,
        max_connections=args.max_connections,
        threads_per_model=True,
        replicas=args.replicas,
    )


def wyoming_from_args(args: argparse.Namespace) -> None:
    """``ggtts wyoming``: load the models, then serve them over the Wyoming protocol until interrupted."""
    try:
        from ggtts.server.wyoming import serve as serve_wyoming
    except ImportError as exc:
        raise GGTTSError(f"the Wyoming server needs {exc.name}: pip install 'ggtts[server]'") from None
    settings = ServerSettings(
        max_queue=args.max_queue,
        max_input_chars=args.max_input_chars,
        timeout_s=args.timeout,
        fast_start=args.fast_start,
        send_timeout_s=args.send_timeout,
        request_timeout_s=args.request_timeout,
        max_connections=args.max_connections,
        replicas=args.replicas,
    )
    model_names(args.model or [])
    options = load_options(args)
    settings = dataclasses.replace(settings, model_threads=models_on_their_threads())
    models = load_models(args.model or [], options, settings.replicas)
    _configure_logging()
    serve_wyoming(models, settings, args.uri)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ggtts.server", description="Serve text-to-speech over HTTP.")
    add_arguments(parser)
    add_threads_argument(parser)
    args = parser.parse_args(argv)
    try:
        configure_threads(args.threads)
        serve_from_args(args)
    except (GGTTSError, ValueError) as exc:
        parser.exit(1, f"error: {exc}\n")
    return 0


__all__ = ["ServerSettings", "add_arguments", "main", "parse_model_spec", "serve", "serve_from_args"]
