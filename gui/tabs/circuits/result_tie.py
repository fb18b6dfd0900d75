"""What a Circuits page's results belong to: the text on screen and the model it ran on.

A page's results are tied to a key — the text on screen (text, BOS, chat, token cap) and the model (how many models
the worker has loaded: a new load is a new model even with the same name). When the key changes the page forgets
what it shows (``changed``). Between a model load and the text's run on it, the result on screen is the previous
model's: :meth:`ResultTie.why_not` says so, and nothing is run on it.
"""
from __future__ import annotations

from PySide6 import QtCore


class ResultTie(QtCore.QObject):
    """The key of the result on screen (``key``) and of the model alone (``model_key``); ``changed`` after either."""

    changed = QtCore.Signal()

    def __init__(self, state, worker, name: str, parent=None):
        super().__init__(parent)
        self.state = state
        self.generation = 0  # models loaded by the worker since the page was made
        self.bundle_generation = 0  # the generation the result on screen was run on
        self._key = self._now()
        worker.model_loaded.connect(self._loaded)
        state.on_bundle(lambda _bundle: self._bundle(), name)

    def _now(self):
        r = self.state.result
        text = None if r is None else (r.text, bool(r.bos), bool(r.chat), int(r.max_tokens), bool(r.causal))
        return text, self.generation

    @property
    def key(self):
        """(text, BOS, chat, cap, causal), model generation: what a result of the text on screen belongs to."""
        return self._key

    @property
    def model_key(self) -> int:
        return self.generation

    def _bundle(self) -> None:
        self.bundle_generation = self.generation
        self._update()

    def _loaded(self, *_args) -> None:
        self.generation += 1
        self._update()

    def _update(self) -> None:
        key = self._now()
        if key != self._key:
            self._key = key
            self.changed.emit()

    def why_not(self) -> str:
        """"" when a page can run on the text on screen, else why not (one sentence)."""
        r = self.state.result
        if r is None:
            return "Run a text first: this page reads the model's next-token logits on the text on screen."
        if not r.causal:
            return decoder_only(r.model_label)
        if self.bundle_generation != self.generation:
            return "The text on screen was run on the previous model; it runs on the new one now."
        return ""


def decoder_only(model_label: str) -> str:
    """The one sentence an encoder gets."""
    return (f"Circuits reads the next-token logits (attribution, lens and patching all score the next token), so it "
            f"needs a decoder, and {model_label} is an encoder: load a decoder (GPT-2, Llama, SmolLM2, …).")
