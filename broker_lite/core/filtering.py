"""Tag expressions: ``*`` or ``TagA || TagB``, as RocketMQ's TAG filter."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from broker_lite.errors import RequestError
from broker_lite.storage import tag_hash

__all__ = ["TagFilter", "parse_tag_expr"]


@dataclass(frozen=True, slots=True)
class TagFilter:
    """``tags`` is ``None`` for "everything"."""

    tags: frozenset[str] | None
    hashes: frozenset[int] | None

    def matches(self, tag: str | None) -> bool:
        return self.tags is None or (tag is not None and tag in self.tags)


@lru_cache(maxsize=1024)
def parse_tag_expr(expr: str | None) -> TagFilter:
    text = (expr or "*").strip()
    if text in ("", "*"):
        return TagFilter(None, None)
    tags = frozenset(t.strip() for t in text.split("||"))
    if "" in tags:
        raise RequestError(f"bad tag expression {expr!r}: empty tag between '||'")
    return TagFilter(tags, frozenset(tag_hash(t) for t in tags))
