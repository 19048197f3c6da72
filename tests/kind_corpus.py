"""Odd memory kinds of a premise, each with its hand-worked verdict under the contract's rule
(``amv_calib.contract.premise_memory_kind``).

Every reader of a premise's kind (the Python and the TypeScript gate, the episodes, the label
join) is held to these verdicts: ``("kind", k)``, ``("none", None)`` or ``("error", pattern)``
where ``pattern`` is a regular expression the message matches. ``FIELDS`` of a case are merged
into a premise; a value of ``ABSENT`` is left out.
"""

from __future__ import annotations

from typing import Any

EMOJI = "\U0001F4C5"  # one code point, two UTF-16 units

NOT_STRING = r"is not a string \(a memory kind is a name such as 'preference'\)"
BLANK = r"is blank \(give null, or leave it out, when the kind is unknown\)"
PADDED = r"begins or ends with whitespace"
TOO_LONG = r"characters, more than 64$"
DIFFER = r"differ \(give one\)$"

#: (id, kind fields, verdict)
CASES: list[tuple[str, dict[str, Any], tuple[str, Any]]] = [
    # absent and null
    ("absent", {}, ("none", None)),
    ("snake-null", {"memory_kind": None}, ("none", None)),
    ("camel-null", {"memoryKind": None}, ("none", None)),
    ("both-null", {"memory_kind": None, "memoryKind": None}, ("none", None)),
    # one spelling, or both
    ("snake", {"memory_kind": "event"}, ("kind", "event")),
    ("camel", {"memoryKind": "event"}, ("kind", "event")),
    ("snake-null-beside-camel", {"memory_kind": None, "memoryKind": "event"}, ("kind", "event")),
    ("camel-null-beside-snake", {"memory_kind": "event", "memoryKind": None}, ("kind", "event")),
    ("both-equal", {"memory_kind": "event", "memoryKind": "event"}, ("kind", "event")),
    ("both-differ", {"memory_kind": "event", "memoryKind": "fact"},
     ("error", r"^memory_kind='event' and memoryKind='fact' " + DIFFER)),
    ("both-differ-in-case", {"memory_kind": "event", "memoryKind": "Event"},
     ("error", r"^memory_kind='event' and memoryKind='Event' " + DIFFER)),
    ("both-differ-in-normal-form", {"memory_kind": "caf\u00e9", "memoryKind": "cafe\u0301"},
     ("error", DIFFER)),
    # not strings
    ("int", {"memory_kind": 3}, ("error", r"^memory_kind=3 " + NOT_STRING)),
    ("zero", {"memoryKind": 0}, ("error", r"^memoryKind=0 " + NOT_STRING)),
    ("float", {"memory_kind": 1.5}, ("error", r"^memory_kind=1\.5 " + NOT_STRING)),
    ("true", {"memory_kind": True}, ("error", r"^memory_kind=True " + NOT_STRING)),
    ("false", {"memoryKind": False}, ("error", r"^memoryKind=False " + NOT_STRING)),
    ("object", {"memory_kind": {"name": "event"}},
     ("error", r"^memory_kind=\{'name': 'event'\} " + NOT_STRING)),
    ("empty-object", {"memoryKind": {}}, ("error", r"^memoryKind=\{\} " + NOT_STRING)),
    ("list", {"memoryKind": ["event"]}, ("error", r"^memoryKind=\['event'\] " + NOT_STRING)),
    ("both-equal-numbers", {"memory_kind": 3, "memoryKind": 3},
     ("error", r"^memory_kind=3 " + NOT_STRING)),
    ("both-equal-objects", {"memory_kind": {"a": 1}, "memoryKind": {"a": 1}},
     ("error", r"^memory_kind=\{'a': 1\} " + NOT_STRING)),
    ("string-beside-number", {"memory_kind": "event", "memoryKind": 3},
     ("error", r"^memoryKind=3 " + NOT_STRING)),
    # blank
    ("empty", {"memory_kind": ""}, ("error", r"^memory_kind='' " + BLANK)),
    ("spaces", {"memory_kind": "   "}, ("error", r"^memory_kind='   ' " + BLANK)),
    ("tab-newline", {"memoryKind": "\t\n"}, ("error", r"^memoryKind='\\t\\n' " + BLANK)),
    ("nbsp", {"memory_kind": "\u00a0"}, ("error", r"^memory_kind='\\xa0' " + BLANK)),
    ("ideographic-space", {"memory_kind": "\u3000\u3000"}, ("error", BLANK)),
    ("blank-beside-kind", {"memory_kind": " ", "memoryKind": "event"},
     ("error", r"^memory_kind=' ' " + BLANK)),
    # whitespace at an end
    ("leading-space", {"memory_kind": " event"}, ("error", r"^memory_kind=' event' " + PADDED)),
    ("trailing-space", {"memoryKind": "event "}, ("error", r"^memoryKind='event ' " + PADDED)),
    ("trailing-nbsp", {"memory_kind": "event\u00a0"}, ("error", PADDED)),
    ("leading-nel", {"memory_kind": "\x85event"}, ("error", PADDED)),
    ("trailing-line-separator", {"memory_kind": "event\u2028"}, ("error", PADDED)),
    ("padded-both-equal", {"memory_kind": "event ", "memoryKind": "event "}, ("error", PADDED)),
    ("inner-space", {"memory_kind": "long term"}, ("kind", "long term")),
    # not whitespace (JavaScript's trim() strips U+FEFF, Python's isspace() counts U+001F)
    ("leading-bom", {"memory_kind": "\ufeffevent"}, ("kind", "\ufeffevent")),
    ("leading-unit-separator", {"memory_kind": "\x1fevent"}, ("kind", "\x1fevent")),
    ("leading-zero-width-space", {"memory_kind": "\u200bevent"}, ("kind", "\u200bevent")),
    # length, in code points
    ("one-char", {"memory_kind": "e"}, ("kind", "e")),
    ("64-chars", {"memory_kind": "k" * 64}, ("kind", "k" * 64)),
    ("65-chars", {"memory_kind": "k" * 65},
     ("error", r"^memory_kind='k{40}'\.\.\. has 65 " + TOO_LONG)),
    ("64-emoji", {"memoryKind": EMOJI * 64}, ("kind", EMOJI * 64)),
    ("65-emoji", {"memoryKind": EMOJI * 65}, ("error", r"has 65 " + TOO_LONG)),
    ("64-combining", {"memory_kind": "e\u0301" * 32}, ("kind", "e\u0301" * 32)),
    ("65-cjk", {"memory_kind": "\u4e8b" * 65}, ("error", r"has 65 " + TOO_LONG)),
    # unicode kinds
    ("accented", {"memory_kind": "pr\u00e9f\u00e9rence"}, ("kind", "pr\u00e9f\u00e9rence")),
    ("cjk-both-equal", {"memory_kind": "\u4e8b\u4ef6", "memoryKind": "\u4e8b\u4ef6"},
     ("kind", "\u4e8b\u4ef6")),
    ("emoji", {"memoryKind": EMOJI}, ("kind", EMOJI)),
]

IDS = [c[0] for c in CASES]


def after(prefix: str, pattern: str) -> str:
    """A pattern matching ``prefix`` (a regular expression) followed by a message that
    ``pattern`` (anchored with ``^`` or not) matches."""
    return "^" + prefix + (pattern[1:] if pattern.startswith("^") else ".*" + pattern)
