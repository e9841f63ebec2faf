"""Values in payloads and kept results: JSON (the tagged forms of more types come later)."""

from __future__ import annotations

import json
from typing import Any

from ..store.codec import CompactJSON

_dumps = CompactJSON(allow_nan=False)


def dumps(value: Any) -> str:
    return _dumps(value)


def loads(text: str) -> Any:
    return json.loads(text)
