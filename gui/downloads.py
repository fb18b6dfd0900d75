"""The note shown when GPT-2 is not downloaded yet, and the download it offers."""
from __future__ import annotations


def offer_gpt2_download(window) -> None:
    window.note.show_note(
        "Using the bundled model: the real GPT-2 is not downloaded yet (about 550 MB).",
        "info", [("Download GPT-2", lambda: download_gpt2(window))])


def download_gpt2(window) -> None:
    window.note.hide()
    window.load_model("gpt2")
