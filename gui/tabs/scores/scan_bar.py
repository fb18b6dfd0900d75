"""The banner of the Head scores tab while a scan over many texts is at hand: what it is, whether the
tab shows it or the text on screen, what the scan warned of (entries of a folder it skipped, texts it
cut), and the button that switches between the two."""
from __future__ import annotations

from PySide6 import QtCore, QtWidgets


class ScanBar(QtWidgets.QFrame):
    """Hidden without a scan. ``toggled`` asks to switch between the scan and the text on screen."""

    toggled = QtCore.Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setFrameShape(QtWidgets.QFrame.Shape.StyledPanel)
        self.setObjectName("scanBar")
        self.setStyleSheet("#scanBar { background: #e7f1ff; border: 1px solid #0b3d9133; border-radius: 4px; }"
                           " #scanBar QLabel { color: #0b3d91; }")
        self.label = QtWidgets.QLabel()
        self.label.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.label.setWordWrap(True)
        self.toggle = QtWidgets.QPushButton()
        self.toggle.clicked.connect(self.toggled)
        row = QtWidgets.QHBoxLayout(self)
        row.setContentsMargins(8, 3, 4, 3)
        row.addWidget(self.label, 1)
        row.addWidget(self.toggle)
        self.hide()

    def show_scan(self, scan, source: str, showing: bool) -> None:
        """Describe ``scan`` (an ``analysis.measures.scan.ScanResult``, or None: hide), from ``source`` (in words),
        as shown (``showing``) or waiting behind the text on screen."""
        if scan is None:
            self.hide()
            return
        what = f"{source + ', ' if source else ''}{scan.tokens:,} tokens, {scan.seconds:.1f} s, {scan.model_label}"
        if showing:
            line = (f"Showing the mean ± std over {scan.n_texts} texts ({what}; each cell the mean, its tooltip the "
                    "std) — not the text above.")
            self.toggle.setText("Back to this text")
        else:
            line = f"Showing the text above. A scan over {scan.n_texts} texts is ready ({what})."
            self.toggle.setText(f"Show the {scan.n_texts} texts")
        self.label.setText("\n".join([line, *scan.warning_lines()]))
        self.show()
