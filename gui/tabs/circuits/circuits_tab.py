"""The Circuits tab: does this head cause the prediction? Four pages, each on the worker, each tied to what it
was computed from (gui/tabs/circuits/result_tie.py):

- *Attribution* (attribution_page.py): direct logit attribution of the text on screen, a layer × head map and the
  other components' shares with the sum rule;
- *Logit lens* (lens_page.py): every layer's residual stream decoded at every position, the final prediction's
  rank per layer, each next token's surprisal;
- *Patching* (patching_page.py): activation patching between a clean and a corrupted prompt of its own;
- *Compare* (compare_page.py): the same two prompts each run on its own, a head or a score map side by side or as
  the difference clean − corrupted (the two pages share the prompts: pair_texts.py);
- *Composition* (composition_page.py): Q-, K- and V-composition between heads, from the weights.

Each page has Copy as code (snippets.py: a Python snippet of the analysis API giving the same numbers) and Save
map (CSV / JSON). Decoders only: every page scores the next token, and an encoder predicts none — the tab says so
in one sentence.
"""
from __future__ import annotations

from PySide6 import QtCore, QtWidgets

from .attribution_page import AttributionPage
from .compare_page import ComparePage
from .composition_page import CompositionPage
from .lens_page import LensPage
from .page import wrapped_label
from .pair_examples import PAIRS
from .pair_texts import PairTexts
from .patching_page import PatchingPage
from .result_tie import ResultTie, decoder_only

PAGES = (AttributionPage, LensPage, PatchingPage, ComparePage, CompositionPage)
SHARING_THE_PAIR = (PatchingPage, ComparePage)


class CircuitsTab(QtWidgets.QWidget):
    """Tab protocol: ``title``, ``CircuitsTab(state, worker)``, ``head_activated``, ``offscreen_figure()``."""

    title = "Circuits"
    head_activated = QtCore.Signal(int, int)

    def __init__(self, state, worker, parent=None):
        super().__init__(parent)
        self.state = state
        self.tie = ResultTie(state, worker, "circuits tab", self)
        self.note = wrapped_label()
        self.note.setStyleSheet("font-weight: bold;")
        self.note.hide()
        self.pages = QtWidgets.QTabWidget()
        self.pages.setDocumentMode(True)
        self.pair = PairTexts(PAIRS[0].clean, PAIRS[0].corrupted, self)  # the Patching and Compare pages' prompts
        for page_class in PAGES:
            shared = {"pair": self.pair} if page_class in SHARING_THE_PAIR else {}
            page = page_class(state, worker, self.tie, **shared)
            page.head_activated.connect(self.head_activated)
            self.pages.addTab(page, page.title)
        self.attribution, self.lens, self.patching, self.compare, self.composition = (
            self.pages.widget(i) for i in range(len(PAGES)))
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 2)
        layout.addWidget(self.note)
        layout.addWidget(self.pages, 1)
        self.tie.changed.connect(self._changed)
        self._changed()

    def page(self, page_class):
        return next(self.pages.widget(i) for i in range(self.pages.count())
                    if isinstance(self.pages.widget(i), page_class))

    def _changed(self) -> None:
        r = self.state.result
        encoder = r is not None and not r.causal
        self.note.setText(decoder_only(r.model_label) if encoder else "")
        self.note.setVisible(encoder)
        self.pages.setEnabled(not encoder)

    def offscreen_figure(self):
        """The page in front's figure (None for a page with nothing to draw)."""
        return self.pages.currentWidget().offscreen_figure()
