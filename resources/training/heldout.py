"""Held-out text for measuring the bundled model's heads: written for AttnScope, not in the corpus.

Used by the model card and by tests/analysis/test_bundled_model.py, so the card's figures and the test's
targets come from the same sentences.
"""

HELDOUT_SENTENCES = (
    "The cat sat on the mat because it was tired.",
    "The server rejected the request because it was overloaded.",
    "A small boat drifted past the harbour while the old keeper watched from his window.",
    "When the function returns a value, the caller decides what to do with it next.",
    "My neighbour paints her fence every spring, and every spring the rain washes half of it away.",
    "The library opens at nine, but the reading room stays closed until the lights are fixed.",
    "If the list is empty, the loop does nothing and the program prints a short message.",
    "She wrote the letter twice, folded it carefully, and then forgot to send it.",
)
