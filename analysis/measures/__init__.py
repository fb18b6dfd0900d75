"""What is measured on a run: head scores, TransformerLens-style scores, lenses, ablation, scans over many texts, parity;
streamed: the same scores, thumbnails and lenses from attention computed a block of query rows at a time."""
