"""``read_items``: a text file split into lines or paragraphs, a folder of .txt files, JSONL; every structural
problem an InputFileError that names the file and (for text and JSONL) the line, before any work."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ggtts.batch.items import MAX_ID_CHARS, InputFileError, Item, read_items
from ggtts.errors import InputError


def _write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8", newline="")
    return path


def _summary(items: list[Item]) -> list[tuple[str, str, int]]:
    """(id, text, line) of each item: the line from ``where`` ("FILE:LINE")."""
    return [(item.id, item.text, int(item.where.rsplit(":", 1)[1])) for item in items]


# ---- text files ------------------------------------------------------------------------------------------------
LINES = "First line.\n\n  Second, indented.  \nThird.\n"
PARAGRAPHS = "One starts\nand goes on.\n\nTwo.\n\n\n \t\nThree\nends here.\n"

TEXT_CASES = [
    # (content, split, expected [(id, text, line)])
    pytest.param(
        LINES, "line", [("0001", "First line.", 1), ("0002", "Second, indented.", 3), ("0003", "Third.", 4)], id="line"
    ),
    pytest.param(
        PARAGRAPHS,
        "paragraph",
        [("0001", "One starts and goes on.", 1), ("0002", "Two.", 4), ("0003", "Three ends here.", 8)],
        id="paragraph",
    ),
    pytest.param(
        PARAGRAPHS,
        "line",
        [
            ("0001", "One starts", 1),
            ("0002", "and goes on.", 2),
            ("0003", "Two.", 4),
            ("0004", "Three", 8),
            ("0005", "ends here.", 9),
        ],
        id="line-of-paragraphs",
    ),
    pytest.param("a\nb\n\nc\n", "auto", [("0001", "a b", 1), ("0002", "c", 4)], id="auto-blank-line-means-paragraphs"),
    pytest.param("a\nb\nc", "auto", [("0001", "a", 1), ("0002", "b", 2), ("0003", "c", 3)], id="auto-no-blank-lines"),
    pytest.param(
        "\n\n  \na\nb\n\n\n", "auto", [("0001", "a", 4), ("0002", "b", 5)], id="auto-blank-lines-at-the-ends-only"
    ),
    pytest.param("a\r\nb\r\n\r\nc", "auto", [("0001", "a b", 1), ("0002", "c", 4)], id="crlf-paragraphs"),
    pytest.param("a\rb", "line", [("0001", "a", 1), ("0002", "b", 2)], id="cr-lines"),
    pytest.param("\ufeffHello.\n", "auto", [("0001", "Hello.", 1)], id="utf8-bom-dropped"),
    pytest.param("Paragraph\n\n", "paragraph", [("0001", "Paragraph", 1)], id="one-paragraph"),
]


@pytest.mark.parametrize(("content", "split", "expected"), TEXT_CASES)
def test_text_file_split(tmp_path: Path, content: str, split: str, expected: list[tuple[str, str, int]]) -> None:
    path = _write(tmp_path / "book.txt", content)
    items = read_items(path, split)
    assert _summary(items) == expected
    assert all(item.where.startswith(f"{path}:") for item in items)
    assert all(item.voice is item.speed is item.model is item.title is None for item in items)


def test_text_file_ids_widen_past_9999_items(tmp_path: Path) -> None:
    path = _write(tmp_path / "many.txt", "".join(f"line {n}\n" for n in range(10_001)))
    items = read_items(path, "line")
    assert [items[0].id, items[9_998].id, items[-1].id] == ["00001", "09999", "10001"]
    assert sorted(item.id for item in items) == [item.id for item in items]  # the file order sorts as names


def test_unknown_split_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "book.txt", "a\n")
    with pytest.raises(InputError, match="unknown split 'words'"):
        read_items(path, "words")


# ---- folders ---------------------------------------------------------------------------------------------------
def test_folder_of_text_files(tmp_path: Path) -> None:
    root = tmp_path / "book"
    _write(root / "b.txt", "Bee.")
    _write(root / "a.txt", "  Ay,\n\nsecond paragraph.  \n")
    _write(root / "sub" / "c.txt", "Sea.")
    _write(root / "sub" / "deeper" / "d.TXT", "Dee.")
    _write(root / ".hidden.txt", "not an item")
    _write(root / ".git" / "x.txt", "not an item")
    _write(root / "sub" / ".backup.txt", "not an item")
    _write(root / "notes.md", "not a text file")
    items = read_items(root)
    assert [(i.id, i.text) for i in items] == [
        ("a", "Ay,\n\nsecond paragraph."),  # a file is one item, whatever its blank lines
        ("b", "Bee."),
        ("sub/c", "Sea."),
        ("sub/deeper/d", "Dee."),
    ]
    assert items[2].where == str(root / "sub" / "c.txt")


@pytest.mark.parametrize(
    ("files", "message"),
    [
        pytest.param({"bad .txt": "x"}, "bad .txt: id 'bad ' cannot name a file", id="space-last"),
        pytest.param({"a<b.txt": "x"}, "a<b.txt: id 'a<b' cannot name a file", id="a-mark-windows-refuses"),
        pytest.param({"-dash.txt": "x"}, "-dash.txt: id '-dash' cannot name a file", id="leading-dash"),
        pytest.param({"A.txt": "x", "a.txt": "y"}, r"a.txt: id 'a' is also used at .*A.txt", id="case-duplicate"),
        pytest.param({"notes.md": "x", ".hidden.txt": "y"}, "no items to speak", id="nothing-but-skipped-files"),
        pytest.param(
            {"bad.txt": b"caf\xe9"}, r"bad.txt: not UTF-8 text \(invalid byte 0xe9 at offset 3\)", id="latin1"
        ),
    ],
)
def test_folder_errors(tmp_path: Path, files: dict[str, str | bytes], message: str) -> None:
    for name, content in files.items():
        _write(tmp_path / "in" / name, content)
    with pytest.raises(InputFileError, match=message):
        read_items(tmp_path / "in")


def test_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    with pytest.raises(InputFileError, match="no items to speak"):
        read_items(tmp_path / "in")


# ---- JSONL -----------------------------------------------------------------------------------------------------
def _jsonl(*lines: object) -> str:
    """One line per argument: a dict as JSON, a str as it is (for broken lines)."""
    return "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)


def test_jsonl_fields(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "job" / "items.jsonl",
        _jsonl(
            {"id": "ch/01", "text": "Hello.", "voice": "v_two", "speed": 2, "model": "m/tiny.gguf", "title": "One"},
            "",
            {"text": "Default id from the line."},
            {"id": 7, "text": "An int id.", "model": "kokoro"},
            {"text": "Absolute model.", "model": str(tmp_path / "abs.gguf"), "speed": 0.5},
            {"id": "x", "text": "Nulls are not given.", "voice": None, "speed": None, "model": None, "title": None},
        ),
    )
    items = read_items(path)
    assert items[0] == Item(
        id="ch/01",
        text="Hello.",
        voice="v_two",
        speed=2.0,
        model=str(tmp_path / "job" / "m" / "tiny.gguf"),  # relative to the JSONL's folder, not the working one
        title="One",
        where=f"{path}:1",
    )
    assert isinstance(items[0].speed, float)
    assert (items[1].id, items[1].where) == ("0003", f"{path}:3")  # the line number: line 2 is blank
    assert (items[2].id, items[2].model) == ("7", "kokoro")  # a name (no suffix) stays a name
    assert (items[3].model, items[3].speed) == (str(tmp_path / "abs.gguf"), 0.5)
    assert items[4] == Item(id="x", text="Nulls are not given.", where=f"{path}:6")


def test_a_json_file_holds_an_array_of_items_or_json_lines(tmp_path: Path) -> None:
    """A corpus saved as .json: an array of item objects, or JSON Lines under that name (as it is often saved);
    never its lines spoken as text."""
    objects = [{"id": "ch-01", "text": "Hello there."}, {"text": "No id."}]
    array = _write(tmp_path / "array.json", json.dumps(objects, indent=2))
    lines = _write(tmp_path / "lines.json", _jsonl(*objects))
    one = _write(tmp_path / "one.json", json.dumps(objects[0], indent=2))  # one object on several lines
    assert [(i.id, i.text, i.where) for i in read_items(array)] == [
        ("ch-01", "Hello there.", f"{array}: item 1"),
        ("0002", "No id.", f"{array}: item 2"),
    ]
    assert [(i.id, i.text) for i in read_items(lines)] == [("ch-01", "Hello there."), ("0002", "No id.")]
    assert [(i.id, i.text) for i in read_items(one)] == [("ch-01", "Hello there.")]
    with pytest.raises(InputFileError, match=rf"{re.escape(str(lines))}:3: not a JSON object"):
        read_items(_write(lines, _jsonl(*objects) + "Hello.\n"))  # as JSON Lines: a line that is not one is named
    broken = _write(
        tmp_path / "broken.json", "[\n" + json.dumps(objects[0]) + ",\n" + json.dumps(objects[1]) + ",\n]\n"
    )
    with pytest.raises(InputFileError, match=r"broken.json:4: not JSON items \(Expecting value"):
        read_items(broken)  # a trailing comma: where json found it, not as JSON Lines' first line
    spread = _write(tmp_path / "spread.json", '{\n  "id": "a",\n  "text": "A."\n  "title": "T"\n}\n')
    with pytest.raises(InputFileError, match=r"spread.json:4: not JSON items \(Expecting ','"):
        read_items(spread)  # one object over several lines, a comma missing on line 3: json's place
    with pytest.raises(InputFileError, match=r"array2.json: item 2: the item has no 'text'"):
        read_items(_write(tmp_path / "array2.json", json.dumps([objects[0], {"id": "x"}])))
    with pytest.raises(InputFileError, match=r"expected a JSON array of items \(or JSON Lines\), got str"):
        read_items(_write(tmp_path / "text.json", json.dumps("Hello.")))


def test_ids_as_ordinary_file_names_have_them(tmp_path: Path) -> None:
    root = tmp_path / "book"
    for name in ("Chapter 1.txt", "bob's.txt", "intro (draft).txt", "A & B, part [2]!.txt"):
        _write(root / name, "Text.")
    assert [i.id for i in read_items(root)] == ["A & B, part [2]!", "Chapter 1", "bob's", "intro (draft)"]


def test_jsonl_item_options(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "items.jsonl",
        _jsonl({"id": "a", "text": "A.", "options": {"lang": "j", "seed": None}}, {"id": "b", "text": "B."}),
    )
    a, b = read_items(path)
    assert (a.options, b.options) == ({"lang": "j"}, None)  # a null is not given
    with pytest.raises(InputFileError, match=r"items2.jsonl:1: 'options' must be an object of option names"):
        read_items(_write(tmp_path / "items2.jsonl", _jsonl({"text": "A.", "options": ["lang", "j"]})))
    for own in ("speed", "voice", "text", "model"):  # the item's own fields, not options: else a clash at synthesis
        with pytest.raises(InputFileError, match=rf"items3.jsonl:1: '{own}' is the item's own field"):
            read_items(_write(tmp_path / "items3.jsonl", _jsonl({"text": "A.", "options": {own: 2}})))


def test_ndjson_suffix_and_bom(tmp_path: Path) -> None:
    path = _write(tmp_path / "items.NDJSON", "\ufeff" + _jsonl({"id": "a", "text": "A."}))
    assert [(i.id, i.text) for i in read_items(path)] == [("a", "A.")]


GOOD = {"id": "good", "text": "Fine."}

JSONL_ERRORS = [
    # (line 2 of the file, the message after "FILE:2: ")
    pytest.param('{"text": "cut short', "not a JSON object", id="bad-json"),
    pytest.param("[1, 2]", "expected a JSON object, got list", id="array"),
    pytest.param('"text"', "expected a JSON object, got str", id="string"),
    pytest.param({"text": "a", "speaker": "x"}, "unknown field 'speaker'", id="unknown-field"),
    pytest.param({"id": "a", "voice": "v_one"}, "the item has no 'text'", id="missing-text"),
    pytest.param({"text": 3}, "'text' must be a str, got 3", id="text-int"),
    pytest.param({"text": ["a"]}, "'text' must be a str", id="text-list"),
    pytest.param({"text": "a", "voice": 1}, "'voice' must be a str", id="voice-int"),
    pytest.param({"text": "a", "model": 5}, "'model' must be a str", id="model-int"),
    pytest.param({"text": "a", "title": {"t": 1}}, "'title' must be a str", id="title-object"),
    pytest.param({"text": "a", "speed": "fast"}, "'speed' must be a number", id="speed-str"),
    pytest.param({"text": "a", "speed": True}, "'speed' must be a number", id="speed-bool"),
    pytest.param('{"text": "a", "speed": NaN}', "'speed' must be a number", id="speed-nan"),
    pytest.param({"id": 1.5, "text": "a"}, "'id' must be a str", id="id-float"),
    pytest.param({"id": True, "text": "a"}, "'id' must be a str", id="id-bool"),
    pytest.param({"id": "../x", "text": "a"}, "id '../x' cannot name a file", id="id-parent"),
    pytest.param({"id": "a/../../x", "text": "a"}, "cannot name a file", id="id-parent-inside"),
    pytest.param({"id": ".hidden", "text": "a"}, "id '.hidden' cannot name a file", id="id-hidden"),
    pytest.param({"id": "a/.b", "text": "a"}, "cannot name a file", id="id-hidden-inside"),
    pytest.param({"id": "a//b", "text": "a"}, "id 'a//b' cannot name a file", id="id-empty-segment"),
    pytest.param({"id": "a/", "text": "a"}, "cannot name a file", id="id-trailing-slash"),
    pytest.param({"id": "/etc/x", "text": "a"}, "cannot name a file", id="id-absolute"),
    pytest.param({"id": "a\\b", "text": "a"}, "cannot name a file", id="id-backslash"),
    pytest.param({"id": "a ", "text": "a"}, "cannot name a file", id="id-space-last"),
    pytest.param({"id": "a\tb", "text": "a"}, "cannot name a file", id="id-tab"),
    pytest.param({"id": "", "text": "a"}, "cannot name a file", id="id-empty"),
    pytest.param({"id": -1, "text": "a"}, "id '-1' cannot name a file", id="id-negative-int"),
    pytest.param({"id": "x" * (MAX_ID_CHARS + 1), "text": "a"}, "cannot name a file", id="id-too-long"),
    pytest.param({"id": "good", "text": "again"}, r"id 'good' is also used at .*items.jsonl:1", id="duplicate"),
    pytest.param({"id": "GOOD", "text": "again"}, r"id 'GOOD' is also used at .*items.jsonl:1", id="case-duplicate"),
    pytest.param('{"text": "a", "speed": 1' + "0" * 5000 + "}", "a number too long to read", id="speed-5000-digits"),
    pytest.param('{"id": 1' + "0" * 5000 + ', "text": "a"}', "a number too long to read", id="id-5000-digits"),
    pytest.param('{"text": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply", id="nested-100000"),
    pytest.param(
        '{"text": "a\\ud800b"}', "'text': the text is not valid Unicode text: .* U\\+D800", id="text-surrogate"
    ),
    pytest.param('{"text": "a", "voice": "\\udfff"}', "'voice': .* U\\+DFFF", id="voice-lone-surrogate"),
    pytest.param({"text": "a"}, None, id="no-error-control"),  # the table's own check: a good line passes
    # ids that break the src: see the report (a null id is a TypeError, not an InputFileError)
    pytest.param(
        {"id": None, "text": "a"},
        "'id' must be a str",
        id="id-null",
    ),
    pytest.param(
        {"text": None},
        "'text' must be a str",
        id="text-null",
    ),
]


@pytest.mark.parametrize(("line", "message"), JSONL_ERRORS)
def test_jsonl_structural_errors(tmp_path: Path, line: object, message: str | None) -> None:
    path = _write(tmp_path / "items.jsonl", _jsonl(GOOD, line, {"id": "after", "text": "Never read."}))
    if message is None:
        assert [i.id for i in read_items(path)] == ["good", "0002", "after"]
        return
    with pytest.raises(InputFileError) as caught:
        read_items(path)
    text = str(caught.value)
    assert text.startswith(f"{path}:2: "), text
    assert "\n" not in text
    assert caught.match(message)


def test_jsonl_ids_equal_after_unicode_normalisation_are_duplicates(tmp_path: Path) -> None:
    path = _write(tmp_path / "items.jsonl", _jsonl({"id": "caf\u00e9", "text": "a"}, {"id": "cafe\u0301", "text": "b"}))
    with pytest.raises(InputFileError, match=r"items.jsonl:2: id 'caf\u00e9' is also used at .*items.jsonl:1"):
        read_items(path)


def test_jsonl_default_id_can_collide_with_an_explicit_one(tmp_path: Path) -> None:
    path = _write(tmp_path / "items.jsonl", _jsonl({"id": "0002", "text": "a"}, {"text": "b"}))
    with pytest.raises(InputFileError, match=r"items.jsonl:2: id '0002' is also used at .*items.jsonl:1"):
        read_items(path)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        pytest.param("empty.txt", "", "no items to speak", id="empty-text-file"),
        pytest.param("blank.txt", " \n\t\n\n", "no items to speak", id="blank-text-file"),
        pytest.param("blank.jsonl", "\n  \n", "no items to speak", id="blank-jsonl"),
        pytest.param("latin1.txt", b"ok\ncaf\xe9\n", r"not UTF-8 text \(invalid byte 0xe9 at offset 6\)", id="latin1"),
        pytest.param("utf16.jsonl", '{"text": "a"}'.encode("utf-16"), "not UTF-8 text", id="utf16-jsonl"),
    ],
)
def test_whole_file_errors(tmp_path: Path, name: str, content: str | bytes, message: str) -> None:
    path = _write(tmp_path / name, content)
    with pytest.raises(InputFileError, match=message) as caught:
        read_items(path)
    assert str(caught.value).startswith(f"{path}: ")


def test_missing_input(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match="no such file or directory"):
        read_items(tmp_path / "nope.txt")
