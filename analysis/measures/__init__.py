"""What is measured on a run: head scores, TransformerLens-style scores, lenses, ablation, scans over many texts, parity."""
