#!/usr/bin/env python3
"""AttnScope: look inside the attention of transformers (GPT-2, Llama-style, GPT-NeoX, BERT-style).

    python main.py                         open the app (bundled model, or GPT-2 if cached)
    python main.py --model gpt2 --text "…" open the app on a model and a text
    python main.py export --model bundled --text "…" --out DIR
    python main.py calc --q '[[1,0,0.5,1]]' --k '[[…]]' --v '[[…]]' [--causal]
    python main.py scan --model bundled --texts FILE|DIR|sample --out DIR
    python main.py ablate --model bundled --text "…" --heads 1.0,1.3 --mode zero|mean [--importance]

The commands live in ``cli/``; heavy imports happen inside them, so ``--help`` answers at once.
"""
import sys


def main(argv: list[str] | None = None) -> int:
    from cli.commands import run

    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
