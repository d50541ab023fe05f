"""Built-in English texts for ``ggtts eval`` and ``ggtts bench``.

The evaluation set covers what a text frontend gets wrong first: numbers, money, percentages, dates and times,
ordinals, abbreviations, questions and exclamations, long sentences with several clauses, and one paragraph.
"""

from __future__ import annotations

from pathlib import Path

from ggtts.errors import GGTTSError

EVAL_SENTENCES: tuple[str, ...] = (
    "The quick brown fox jumps over the lazy dog.",
    "Please call me back when you get home tonight.",
    "Where did you put the keys to the car?",
    "She bought 3 apples and 12 oranges at the market.",
    "The ticket costs $25, but students pay only $12.50.",
    "Our sales grew by 15% in the second quarter.",
    "The meeting starts at 9:30 tomorrow morning.",
    "He was born on March 3rd, 1985, in a small town.",
    "Dr. Smith lives on the 2nd floor of the old building.",
    "Can you believe it's already the end of the year?",
    "I don't think we'll make it to the station on time.",
    "The population of the city is about 250,000 people.",
    "Turn left at the next corner, then walk two blocks north.",
    "Wow, that was the best concert I have ever seen!",
    "The train to Boston leaves from platform 4 at 6:15.",
    "Mr. Brown asked whether the report would be ready by Friday.",
    "Water boils at 100 degrees Celsius at sea level.",
    "My phone number has changed, so please update your records.",
    "The company was founded in 1998 and now employs over 3,000 people.",
    "Although it was raining heavily, the children insisted on playing outside in the garden all afternoon.",
    "Would you like coffee or tea with your breakfast?",
    "The recipe calls for 2 cups of flour and half a cup of sugar.",
    "Scientists have discovered a new species of frog in the rainforest.",
    "Reading a good book before bed helps me relax and sleep better.",
    (
        "Every morning, the old fisherman walked down to the harbor before sunrise. He checked his nets, "
        "talked with the other sailors about the weather, and then rowed his small boat out beyond the "
        "lighthouse. Most days he came back with enough fish to sell at the market, and on good days he "
        "gave the extra to his neighbors."
    ),
)

# About 60 words, for speed measurements: the same text for every engine in a comparison.
BENCH_PARAGRAPH = (
    "Speech synthesis has come a long way in a few years. Modern models read news articles, books and "
    "messages aloud in voices that sound natural, and many of them run on an ordinary laptop without a "
    "graphics card. This paragraph is long enough to measure how quickly a model starts speaking, and how "
    "fast it produces the rest of the audio."
)

# Short texts synthesized one after another to measure throughput.
BENCH_BATCH: tuple[str, ...] = (
    "Good morning, how are you today?",
    "The weather will be sunny this afternoon.",
    "Please remember to bring your umbrella.",
    "The library closes at six in the evening.",
    "Thank you for listening to this message.",
)

WARMUP_TEXT = "This is a short warm up sentence."


def read_sentences(path: str | Path) -> list[str]:
    """One sentence (or paragraph) per non-empty line of a UTF-8 file; lines starting with '#' are skipped."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise GGTTSError(f"{path}: cannot read sentences ({e.strerror})") from None
    except UnicodeDecodeError:
        raise GGTTSError(f"{path}: not UTF-8 text") from None
    lines = [line.strip() for line in text.splitlines()]
    sentences = [line for line in lines if line and not line.startswith("#")]
    if not sentences:
        raise GGTTSError(f"{path}: no sentences (one per line expected)")
    return sentences
