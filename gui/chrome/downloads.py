"""GPT-2 when it is not downloaded yet: the note that offers it, and the download (File → Download
GPT-2 stays in the menu for as long as GPT-2 is not in the cache)."""
from __future__ import annotations

NOTE = ("Using the bundled model, a 4-layer × 4-head GPT-2-style model trained offline for this app (its own "
        "4,096-token vocabulary, 256-token context; Help → About has its model card). The real GPT-2 is not "
        "downloaded yet (about 550 MB).")
SMOLLM2_NOTE = ("Using SmolLM2-135M-Instruct, a real pretrained Llama-style decoder (30 layers × 9 heads) that "
                "works offline (Help → About has its card). GPT-2 is not downloaded yet (about 550 MB).")


def offer_gpt2_download(window, about: str = "bundled") -> None:
    """The note, about the model ``about`` (the one the app opened on instead: bundled or smollm2): it goes when
    another model is loaded."""
    from analysis.model.catalogue import SMOLLM2

    window.note.show_note(SMOLLM2_NOTE if about == SMOLLM2 else NOTE, "info",
                          [("Download GPT-2", lambda: download_gpt2(window))], about=about)


def download_gpt2(window) -> None:
    window.note.hide()
    window.load_model("gpt2")
