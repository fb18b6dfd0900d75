"""The example texts of the Examples menu (resources/texts/examples.txt), each with what to look for and,
where its label names one, the head to open."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

EXAMPLES_FILE = Path(__file__).resolve().parents[2] / "resources" / "texts" / "examples.txt"


@dataclass(frozen=True)
class Example:
    """One example text: what to look for (``label``), the text, and the head it names (or None)."""

    label: str
    text: str
    head: tuple[int, int] | None = None


HEAD_FIELD = re.compile(r"^(\d+)\.(\d+)$")


def parse_example(line: str) -> Example | None:
    """An example from one line of examples.txt: ``label | text`` or ``label | L.H | text`` (the head the
    label names, e.g. ``0.2`` for layer 0, head 2); a line without `` | `` is its own text. ``\\n`` in a
    text is a line break. Comments (``#``) and blank lines give None."""
    if not line.strip() or line.startswith("#"):
        return None
    label, sep, rest = line.partition(" | ")
    if not sep:
        return Example("", line.replace("\\n", "\n"))
    field, sep, text = rest.partition(" | ")
    match = HEAD_FIELD.match(field.strip()) if sep else None
    head = (int(match[1]), int(match[2])) if match else None
    return Example(label.strip(), (text if match else rest).replace("\\n", "\n"), head)


def example_texts() -> list[Example]:
    """The examples of resources/texts/examples.txt, in file order (see :func:`parse_example`)."""
    try:
        lines = EXAMPLES_FILE.read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = ["The cat sat on the mat because it was tired."]
    return [e for e in map(parse_example, lines) if e is not None]
