"""Clean / corrupted prompt pairs for the Patching page, each with the answer and the wrong token of its logit
difference (as typed, leading space included). The IOI pair is Wang et al. 2022's pattern: in the clean prompt the
indirect object (Mary) is the answer; the corrupted one names the other person twice."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PromptPair:
    label: str
    clean: str
    corrupted: str
    answer: str
    wrong: str


PAIRS = (
    PromptPair("IOI: indirect object (Mary vs John)", "When Mary and John went to the store, John gave a drink to",
               "When Mary and John went to the store, Mary gave a drink to", " Mary", " John"),
    PromptPair("IOI: another scene (Anna vs Tom)", "After Anna and Tom arrived at the party, Tom handed a gift to",
               "After Anna and Tom arrived at the party, Anna handed a gift to", " Anna", " Tom"),
    # every earlier "Potter" is changed, so the corrupted run has no induction cue for it left (walk 6: the old
    # pair kept the first one, and " Weasley" is three tokens in SmolLM2's vocabulary)
    PromptPair("Induction: a repeated name", "Harry Potter went home. Later, Harry Potter went home. Harry",
               "Harry Smith went home. Later, Harry Smith went home. Harry", " Potter", " Smith"),
)
