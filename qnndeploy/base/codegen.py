"""Text that goes into generated Kotlin, Gradle and Markdown: every value through one escaping function for the place
it lands in (a string literal, a line comment, prose), and the names that become code (packages, identifiers)
checked against the languages' own rules. A name is data: it can never end a literal or a comment, nor start a
line of its own."""

from __future__ import annotations

import keyword
import re
import unicodedata

from qnndeploy.base.errors import BadInput

# Java's and Kotlin's keywords (hard and the modifiers that break a package clause), and Python's, which the
# sherpa-onnx engine's users may script against: none may be a package segment or a generated identifier.
RESERVED = frozenset(keyword.kwlist) | {
    "abstract", "assert", "boolean", "break", "byte", "case", "catch", "char", "class", "const", "continue",
    "default", "do", "double", "else", "enum", "extends", "final", "finally", "float", "for", "goto", "if",
    "implements", "import", "instanceof", "int", "interface", "long", "native", "new", "package", "private",
    "protected", "public", "return", "short", "static", "strictfp", "super", "switch", "synchronized", "this",
    "throw", "throws", "transient", "try", "void", "volatile", "while", "true", "false", "null", "var", "record",
    "yield", "as", "fun", "in", "is", "object", "typealias", "typeof", "val", "when",
}
# java.* is closed to application code (the JVM refuses it), kotlin.* to all but the standard library (kotlinc
# refuses it), and android.* is the platform's.
RESERVED_ROOTS = ("java", "javax", "kotlin", "android")
NAME_MAX_BYTES = 255  # a package segment is a folder name: the file-system limit of one name
_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def _unprintable(ch: str) -> bool:
    """Control, format, line/paragraph separator and surrogate characters: what can end a line, reorder what is
    shown (U+202E) or not be encoded."""
    return unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs")


def _utf16_escapes(ch: str) -> str:
    units = ch.encode("utf-16-be")
    return "".join(f"\\u{units[i]:02x}{units[i + 1]:02x}" for i in range(0, len(units), 2))


def _ascii_literal(text: str, specials: str) -> str:
    """Printable ASCII as it is, the `specials` backslash-escaped, everything else as \\uXXXX UTF-16 units: the
    generated source is plain ASCII whatever the name holds."""
    return "".join("\\" + ch if ch in specials else ch if " " <= ch <= "~" else _utf16_escapes(ch)
                   for ch in str(text))


def kotlin_string(text: str) -> str:
    """The content of a Kotlin "..." literal (also Gradle's Kotlin DSL): backslash, quote and $ escaped."""
    return _ascii_literal(text, '\\"$')


def groovy_string(text: str) -> str:
    """The content of a Groovy '...' or "..." literal (Gradle's Groovy DSL): backslash, both quotes and $ escaped
    (a "..." string interpolates $)."""
    return _ascii_literal(text, "\\'\"$")


def line_comment(text: str) -> str:
    """Text for a // comment or a line of prose (README): every unprintable character shown as \\uXXXX, so the text
    stays on its line whatever it holds."""
    return "".join(f"\\u{ord(ch):04x}" if _unprintable(ch) else ch for ch in str(text))


def identifier(text: str) -> str:
    """A name used as a Kotlin identifier as it is; refused (ValueError, a bug in qnndeploy's own data) otherwise."""
    name = str(text)
    if not _IDENTIFIER.fullmatch(name) or name in RESERVED:
        raise ValueError(f"{name!r} is not a Kotlin identifier")
    return name


def plain(value: object) -> object:
    """Jinja's finalize for generated files: a value that still holds an unprintable character was put in a template
    without its escaping filter; refuse it rather than write a line that did not come from the template."""
    if isinstance(value, str) and any(_unprintable(ch) for ch in value):
        raise BadInput(f"{value!r} holds a control character and reached a generated file unescaped: "
                       "please report this qnndeploy bug")
    return value


def package_problem(name: str) -> str | None:
    """Why `name` cannot be an Android app's Java/Kotlin package, or None: dot-separated identifiers (at least
    two), none a keyword, not under a root the JVM, kotlinc or Android reserve, each a file name."""
    parts = name.split(".")
    if len(parts) < 2:
        return "it needs at least two parts"
    for p in parts:
        if not _IDENTIFIER.fullmatch(p):
            return f"'{line_comment(p)}' is not an identifier (a letter, then letters, digits or _)"
        if p in RESERVED:
            return f"'{p}' is a Java or Kotlin keyword"
        if len(p.encode()) > NAME_MAX_BYTES:
            return f"a part is {len(p.encode())} bytes, more than the {NAME_MAX_BYTES} a folder name may have"
    if parts[0] in RESERVED_ROOTS:
        return f"packages under {parts[0]}. are reserved (the JVM, kotlinc and Android refuse them in an app)"
    return None


def check_package(name: str) -> None:
    why = package_problem(name)
    if why is not None:
        raise BadInput(f"invalid package name '{line_comment(name)}': {why}; use dot-separated identifiers "
                       "such as com.example.app")
