"""The input of a batch job: a text file (one item per line or per paragraph), a directory of ``.txt`` files
(one item per file), or JSONL (one object per line with ``id``, ``text`` and optional ``voice``, ``speed``,
``model`` and ``title``). Structural problems (bad JSON, a duplicate or unsafe id, an unknown field) stop the job
before any work, naming the line; an item's own problems (empty text, an unknown voice) are found when it runs and
are recorded as that item's failure.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ggtts.errors import InputError
from ggtts.families.base import check_unicode

SPLITS = ("auto", "line", "paragraph")
TEXT_SUFFIXES = (".txt",)
JSONL_SUFFIXES = (".jsonl", ".ndjson")
JSON_SUFFIX = ".json"  # an array of items, or JSON Lines saved as .json
JSONL_FIELDS = ("id", "text", "voice", "speed", "model", "title", "options")
MAX_ID_CHARS = 200
# An id names the item's output file: path segments of a letter or digit, then letters, digits, spaces and the
# marks ordinary file names hold (". , ' ( ) & + ! [ ] _ -"), not ending in a space (no leading dot, so no '..' and
# no hidden files; none of the characters Windows refuses), separated by '/' (a directory input's subfolders).
_ID_SEGMENT = re.compile(r"[^\W](?:[\w .,'()&+!\[\]-]*[\w.,'()&+!\[\]-])?")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")


class InputFileError(InputError):
    """The batch input cannot be read as items: one line naming the file, the line and the problem."""


@dataclass(frozen=True)
class Item:
    """One text to speak into one file. ``None`` fields take the job's value (its model, voice, speed); ``options``
    (its model's family options: ``{"lang": "j"}``) go over the job's."""

    id: str
    text: str
    voice: str | None = None
    speed: float | None = None
    model: str | None = None
    title: str | None = None
    where: str = ""  # "FILE:LINE", for messages
    options: dict[str, Any] | None = field(default=None, hash=False)  # (an item stays hashable)


def read_items(source: str | Path, split: str = "auto") -> list[Item]:
    """The items of ``source`` in order. ``split`` applies to a text file: ``line`` (each non-blank line),
    ``paragraph`` (blocks between blank lines, their lines joined), or ``auto`` (paragraphs where the file has a
    blank line between two texts, else lines)."""
    if split not in SPLITS:
        raise InputError(f"unknown split '{split}'; use one of {', '.join(SPLITS)}")
    path = Path(source)
    if path.is_dir():
        items = list(_directory_items(path))
    elif not path.exists():
        raise InputFileError(f"{path}: no such file or directory")
    elif path.suffix.lower() in JSONL_SUFFIXES:
        items = list(_jsonl_items(path))
    elif path.suffix.lower() == JSON_SUFFIX:
        items = list(_json_items(path))
    else:
        items = list(_text_items(path, split))
    if not items:
        raise InputFileError(f"{path}: no items to speak (the input holds no text)")
    check_unique(items)
    return items


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputFileError(f"{path}: cannot read ({e.strerror})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        bad = f"invalid byte 0x{data[e.start]:02x} at offset {e.start}"
        raise InputFileError(f"{path}: not UTF-8 text ({bad})") from None


def _numbered(n: int, total: int) -> str:
    return str(n).zfill(max(4, len(str(total))))


def _text_items(path: Path, split: str) -> Iterator[Item]:
    text = _read_text(path).replace("\r\n", "\n").replace("\r", "\n")
    blocks: list[tuple[int, str]] = []  # (1-based line number, text)
    if split == "auto":
        split = "paragraph" if _PARAGRAPH_BREAK.search(text.strip()) else "line"
    if split == "line":
        blocks = [(n, line.strip()) for n, line in enumerate(text.split("\n"), 1) if line.strip()]
    else:
        line = 1
        for block in _PARAGRAPH_BREAK.split(text):
            lines = block.split("\n")
            first = next((i for i, s in enumerate(lines) if s.strip()), None)
            if first is not None:
                blocks.append((line + first, " ".join(s.strip() for s in lines if s.strip())))
            line += block.count("\n") + 2  # the break itself spans two newlines at least
    for n, (line_no, block_text) in enumerate(blocks, 1):
        yield Item(id=_numbered(n, len(blocks)), text=block_text, where=f"{path}:{line_no}")


def _directory_items(root: Path) -> Iterator[Item]:
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES)
    for p in files:
        rel = p.relative_to(root).with_suffix("")
        if any(part.startswith(".") for part in rel.parts):
            continue  # hidden files and folders (editor backups, .git) are not items
        yield Item(id=check_id(rel.as_posix(), str(p)), text=_read_text(p).strip(), where=str(p))


def _jsonl_items(path: Path) -> Iterator[Item]:
    lines = _read_text(path).split("\n")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        yield _item(_parsed(line, where), where, _numbered(n, len(lines)), path)


def _json_items(path: Path) -> Iterator[Item]:
    """A ``.json`` file: a JSON array of item objects, or (as it is often saved) JSON Lines."""
    text = _read_text(path)
    start = text.lstrip("\ufeff \t\r\n")
    # one JSON document (an array, or one object over several lines), not JSON Lines: its mistakes are json's own
    whole = start.startswith("[") or (start.startswith("{") and not _parses(start.split("\n", 1)[0]))
    try:
        document = json.loads(text)
    except json.JSONDecodeError as e:
        if whole:
            raise InputFileError(f"{path}:{e.lineno}: not JSON items ({e.msg} at column {e.colno})") from None
        yield from _jsonl_items(path)  # JSON Lines, or a mistake: read line by line, which names the line at fault
        return
    except ValueError as e:  # a whole number past Python's limit on digits
        if whole:
            raise InputFileError(f"{path}: not items: a number too long to read ({e})") from None
        yield from _jsonl_items(path)
        return
    except RecursionError:
        raise InputFileError(f"{path}: not items: its JSON is nested too deeply") from None
    if isinstance(document, dict):  # one item, on one line or several
        yield _item(document, str(path), "0001", path)
        return
    if not isinstance(document, list):
        raise InputFileError(f"{path}: expected a JSON array of items (or JSON Lines), got {type(document).__name__}")
    for n, obj in enumerate(document, 1):
        yield _item(obj, f"{path}: item {n}", _numbered(n, len(document)), path)


def _parses(line: str) -> bool:
    try:
        json.loads(line)
    except (ValueError, RecursionError):
        return False
    return True


def _parsed(line: str, where: str) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as e:
        raise InputFileError(f"{where}: not a JSON object ({e.msg} at column {e.colno})") from None
    except RecursionError:
        raise InputFileError(f"{where}: not an item: its JSON is nested too deeply") from None
    except ValueError as e:  # a whole number past Python's limit on digits
        raise InputFileError(f"{where}: not an item: a number too long to read ({e})") from None


def _item(obj: Any, where: str, default_id: str, path: Path) -> Item:
    """One item object of a JSON input (``where``: its place, for messages; ``default_id``: its number)."""
    if not isinstance(obj, dict):
        raise InputFileError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - set(JSONL_FIELDS))
    if unknown:
        raise InputFileError(f"{where}: unknown field {unknown[0]!r}; the fields are {', '.join(JSONL_FIELDS)}")
    if "text" not in obj:
        raise InputFileError(f"{where}: the item has no 'text'")
    item_id = obj.get("id", default_id)
    if isinstance(item_id, int) and not isinstance(item_id, bool):
        item_id = str(item_id)
    if not isinstance(item_id, str):
        raise InputFileError(f"{where}: 'id' must be a str or a whole number, got {json.dumps(item_id)[:40]}")
    if not isinstance(obj["text"], str):
        raise InputFileError(f"{where}: 'text' must be a str, got {json.dumps(obj['text'])[:40]}")
    for name in ("id", "text", "voice", "model", "title"):
        value = item_id if name == "id" else obj.get(name)
        if isinstance(value, str):
            try:
                check_unicode(value)
            except InputError as e:
                raise InputFileError(f"{where}: '{name}': {e}") from None
    return Item(
        id=check_id(item_id, where),
        text=obj["text"],
        voice=_field(obj, "voice", str, where),
        speed=_speed(obj.get("speed"), where),
        model=_model(_field(obj, "model", str, where), path.parent),
        title=_field(obj, "title", str, where),
        where=where,
        options=_options(obj.get("options"), where),
    )


def _field(obj: dict[str, Any], name: str, kind: type, where: str) -> Any:
    value = obj.get(name)
    if value is not None and not isinstance(value, kind):
        raise InputFileError(f"{where}: '{name}' must be a {kind.__name__}, got {json.dumps(value)[:40]}")
    return value


def _options(value: Any, where: str) -> dict[str, Any] | None:
    """An item's family options: an object of names to values (its model's family checks them, for the item)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InputFileError(f"{where}: 'options' must be an object of option names, got {json.dumps(value)[:40]}")
    own = next((name for name in value if name in JSONL_FIELDS), None)
    if own is not None:
        raise InputFileError(f"{where}: '{own}' is the item's own field, not one of its options: give it beside 'text'")
    return {name: v for name, v in value.items() if v is not None} or None


def _speed(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputFileError(f"{where}: 'speed' must be a number, got {json.dumps(value)[:40]}")
    return float(value)


def _model(model: str | None, base: Path) -> str | None:
    """A model path relative to the JSONL file's folder (so a job moves with its input); names stay names."""
    if model is None:
        return None
    return str(base / model) if Path(model).suffix and not Path(model).is_absolute() else model


def check_id(item_id: str, where: str) -> str:
    """``item_id`` if it can name a file under the output folder, else an InputFileError naming ``where``."""
    item_id = unicodedata.normalize("NFC", item_id)
    segments = item_id.split("/")
    if not item_id or len(item_id) > MAX_ID_CHARS or not all(_ID_SEGMENT.fullmatch(s) for s in segments):
        raise InputFileError(
            f"{where}: id {item_id!r} cannot name a file: use a letter or digit first, then letters, digits, spaces "
            f"and . , ' ( ) & + ! [ ] _ - (not a space last), '/' between folders, at most {MAX_ID_CHARS} characters"
        )
    return item_id


def check_unique(items: list[Item]) -> None:
    """An InputFileError naming the first id used twice."""
    seen: dict[str, str] = {}
    for i, item in enumerate(items):
        key, where = item.id.casefold(), item.where or f"items[{i}]"  # (an item made in Python: its place)
        if key in seen:
            raise InputFileError(f"{where}: id {item.id!r} is also used at {seen[key]}; ids must be unique")
        seen[key] = where
