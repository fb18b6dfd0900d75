"""AttnScope's analysis core: model loading, inference, numpy attention, head scores, export.

Plain Python, numpy and torch; never imports Qt. Heavy imports (torch, transformers) happen
inside the functions that need them so that importing this package is fast.

One axis order everywhere: attention arrays are ``(layer, head, query, key)``.
"""
