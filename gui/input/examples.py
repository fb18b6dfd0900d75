"""The example texts of the Examples menu (resources/texts/examples.txt), each with what to look for and,
where its label names one, the head to open — a head of the model its section of the file is for."""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

EXAMPLES_FILE = Path(__file__).resolve().parents[2] / "resources" / "texts" / "examples.txt"


#: The models examples.txt has a section for (``[smollm2]`` starts one), as the menu names them; lines before any
#: section are the bundled model's.
EXAMPLE_MODELS = {"bundled": "the bundled model", "smollm2": "SmolLM2-135M-Instruct"}


@dataclass(frozen=True)
class Example:
    """One example text: what to look for (``label``), the text, the head it names (or None) and the model
    (``source`` name, a key of :data:`EXAMPLE_MODELS`) whose head that is."""

    label: str
    text: str
    head: tuple[int, int] | None = None
    model: str = "bundled"


HEAD_FIELD = re.compile(r"^(\d+)\.(\d+)$")
SECTION = re.compile(r"^\[(\w+)\]\s*$")


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
    """The examples of resources/texts/examples.txt, in file order (see :func:`parse_example`), each with the
    model of its section (``[smollm2]`` starts SmolLM2's; before any section: the bundled model's)."""
    try:
        lines = EXAMPLES_FILE.read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = ["The cat sat on the mat because it was tired."]
    examples, model = [], "bundled"
    for line in lines:
        section = SECTION.match(line)
        if section and section[1] in EXAMPLE_MODELS:
            model = section[1]
            continue
        example = parse_example(line)
        if example is not None:
            examples.append(replace(example, model=model))
    return examples
