"""The names an export writes that the path checks and the folder writes both know: the marker file, the
generator tag, and the longest path an export writes inside its folder."""
from __future__ import annotations

#: Written into every export folder: ``{"generator": "attnscope", "files": [...], "folders": [...]}``, what
#: the export wrote (paths relative to the folder). A folder holding it may be replaced by a new export
#: when it holds nothing else.
MARKER = ".attnscope-export.json"
GENERATOR = "attnscope"
#: The longest path an export writes inside its folder (staging and the earlier export moved aside hold the
#: same): the marker; ``scores_per_text.csv`` and ``heads/L<l>H<h>.png`` are shorter for any model below
#: 10,000 layers and heads.
LONGEST_INNER = max(len(f"/{MARKER}"), len("/scores_per_text.csv"), len("/heads/L9999H9999.png"))
