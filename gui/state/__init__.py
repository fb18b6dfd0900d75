"""State and threading: the one view state, the worker thread that owns the model, and its jobs."""
