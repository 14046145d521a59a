"""JSON that Reckon stores exactly as it was sent, or refuses, naming where.

Python's ``json`` and orjson both accept documents that cannot be kept as given: a duplicate key
(the last one silently wins), an integer beyond 64 bits (orjson turns it into a float; PostgreSQL's
bigint and most readers cannot hold it), a NUL character (PostgreSQL's jsonb and text refuse it)
and a lone UTF-16 surrogate (not a character at all). ``json_loads_strict`` refuses all four with a
message naming the place (``events[2].payload.amount``); the importer and the HTTP API both use it.
"""

from __future__ import annotations

import json

import orjson

INT_MIN, INT_MAX = -(2**63), 2**63 - 1


class JsonRefused(ValueError):
    """A document that is not JSON, or JSON that cannot be stored as sent; ``where`` names the place."""

    def __init__(self, message: str, where: str = ""):
        self.where = where
        super().__init__(message)


class _Pairs(dict):
    """An object that had a duplicate key: the first repeated key is kept for the message."""

    duplicate: str = ""


def _pairs(pairs: list[tuple[str, object]]) -> dict:
    out = _Pairs(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        out.duplicate = next(k for k, _ in pairs if k in seen or seen.add(k))
    return out


def _no_constant(name: str):
    raise JsonRefused(f"{name} is not a JSON value")


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return "contains a NUL character (\\u0000)"
    if not text.isascii():
        # UTF-8 has no encoding for a surrogate: one C call instead of a test per character.
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return "contains a lone UTF-16 surrogate (not a character)"
    return None


def _place(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def json_problem(value: object, root: str = "") -> JsonRefused | None:
    """The first thing in a decoded document that cannot be stored as sent, or None. Iterative, so a
    deeply nested document cannot exhaust the stack here."""
    stack: list[tuple[str, object]] = [(root, value)]
    while stack:
        path, v = stack.pop()
        if isinstance(v, str):
            problem = _text_problem(v)
            if problem:
                return JsonRefused(f"{path or 'the value'} {problem}", path)
        elif isinstance(v, bool) or v is None or isinstance(v, float):
            continue
        elif isinstance(v, int):
            if not INT_MIN <= v <= INT_MAX:
                return JsonRefused(f"{path or 'the value'} is an integer outside the signed 64-bit range ({INT_MIN} to {INT_MAX})", path)
        elif isinstance(v, dict):
            if isinstance(v, _Pairs) and v.duplicate:
                where = _place(path, v.duplicate)
                return JsonRefused(f"{where} appears twice in one object (duplicate key)", where)
            for k, item in v.items():
                problem = _text_problem(k)
                if problem:
                    return JsonRefused(f"a key in {path or 'the top-level object'} {problem}", path)
                stack.append((_place(path, k), item))
        elif isinstance(v, list):
            stack.extend((f"{path}[{i}]", item) for i, item in enumerate(v))
    return None


def json_loads_strict(text: str | bytes, root: str = "") -> object:
    """Decode ``text`` with the standard library, refusing NaN and Infinity, duplicate keys, integers
    outside 64 bits, NUL characters, lone surrogates and nesting too deep to decode (JsonRefused)."""
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_constant=_no_constant)
    except JsonRefused:
        raise
    except RecursionError:
        raise JsonRefused("not JSON (nested too deeply)") from None
    except UnicodeDecodeError as exc:
        raise JsonRefused(f"not UTF-8 (byte {exc.start + 1})") from None
    except ValueError as exc:
        msg = getattr(exc, "msg", str(exc))
        where = f" at line {exc.lineno} column {exc.colno}" if hasattr(exc, "colno") else ""
        raise JsonRefused(f"not JSON ({msg}{where})") from None
    problem = json_problem(value, root)
    if problem:
        raise problem
    return value


# One translated copy of a document answers two questions with one substring search each: every
# digit becomes "0" (a run of 19 is a long number) and all white space a blank (a quote followed
# by white space).
_FOLD = bytes.maketrans(b"123456789\t\r\n", b"000000000   ")
_LONG_NUMBER = b"0" * 19


def _keys_count(value: object) -> int:
    count = 0
    stack = [value] if type(value) is dict or type(value) is list else []
    push, pop = stack.append, stack.pop
    while stack:
        v = pop()
        if type(v) is dict:
            count += len(v)
            v = v.values()
        for x in v:
            t = type(x)
            if t is dict or t is list:
                push(x)
    return count


def _proved_py(raw: bytes, value: object) -> bool:
    """Whether ``raw``'s bytes prove that ``value``, orjson's decoding of them, holds nothing the
    strict decoder refuses (``json_loads_strict_bytes`` says why)."""
    # ``find`` and ``int in bytes`` rather than ``bytes in bytes``: the same answers, and in CPython
    # 3.11 the latter costs several times as much per line (a line is checked per event imported).
    folded = raw.translate(_FOLD)
    escaped = 92 in raw  # a backslash
    if folded.find(b'" ') >= 0 or folded.find(_LONG_NUMBER) >= 0 or (escaped and (raw.find(b"\\u0000") >= 0 or raw.find(b'\\\\"') >= 0)):
        return False
    return raw.count(b'":') - (raw.count(b'\\":') if escaped else 0) == _keys_count(value)




def json_loads_strict_bytes(raw: bytes, root: str = "") -> object:
    """``json_loads_strict`` for one UTF-8 document, the same answer several times faster: orjson
    decodes it and a few scans of the bytes prove it holds none of what the strict decoder refuses;
    anything they cannot prove goes to ``json_loads_strict`` itself, which then gives the message.

    Why this is exact: orjson refuses invalid UTF-8, lone surrogates, NaN and Infinity itself.
    A NUL can only be written ``\\u0000`` (JSON has no raw control characters in strings), so
    without that text there is none. An integer outside 64 bits has at least 19 digits. Duplicate
    keys: in a text with no escaped backslash before a quote (``\\\\"``) and no white space after a
    quote, every key written is an unescaped quote directly followed by a colon, so the count of
    ``":`` less the escaped ``\\":`` is the number of keys written plus, at most, string values that
    begin with a colon. A duplicate leaves the decoded objects with fewer keys than were written,
    so equal counts prove there is none. Anything else takes the strict path.
    """
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    else:
        if _proved_py(raw, value):
            return value
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonRefused(f"not UTF-8 (byte {exc.start + 1})") from None
    return json_loads_strict(text, root)
