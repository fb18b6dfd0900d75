"""Where AttnScope keeps what it can rebuild: converted GGUF models, the list of model files found on disk.

``ATTNSCOPE_CACHE`` when set, else ``$XDG_CACHE_HOME/attnscope``, else ``~/.cache/attnscope`` (on every
platform: one place to find and delete). Everything under it may be deleted at any time; it is made again.
"""
from __future__ import annotations

import os
from pathlib import Path

ENVIRONMENT = "ATTNSCOPE_CACHE"


def user_cache_dir() -> Path:
    """The cache folder (not created here)."""
    if os.environ.get(ENVIRONMENT):
        return Path(os.environ[ENVIRONMENT]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "attnscope"
