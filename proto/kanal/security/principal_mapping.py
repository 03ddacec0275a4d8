"""Mapping a client certificate's subject to a principal name: Kafka's `ssl.principal.mapping.rules`.

The subject is the certificate's distinguished name as RFC 4514 writes it (the last RDN first, the way
Java's X500Principal.getName() and OpenSSL's RFC 2253 printing write it): a certificate issued to
`/O=Example/OU=eng/CN=alice` is `CN=alice,OU=eng,O=Example`.

Rules, a comma-separated list tried in order; the first that applies gives the name:

    DEFAULT                          the whole subject, unchanged (`CN=alice,OU=eng,O=Example`)
    RULE:PATTERN/REPLACEMENT/        when PATTERN (a Python regular expression) matches the WHOLE subject,
    RULE:PATTERN/REPLACEMENT/L       REPLACEMENT with $1, $2, ... replaced by the groups ($$ is a dollar);
    RULE:PATTERN/REPLACEMENT/U       L lower-cases the result, U upper-cases it

A `/` inside PATTERN or REPLACEMENT is written `\\/`; whitespace around rules is ignored. When no rule
applies the certificate maps to no name and the call is refused (Kafka's NoMatchingRule). Kafka's default
is `DEFAULT`; a cluster that names its nodes by CN writes `RULE:^CN=([^,]+)(,.*)?$/$1/,DEFAULT`, so a
broker's certificate `CN=broker-1` is `User:broker-1`.

Pure: parsing raises ValueError with one line; mapping is a function of the rules and the subject.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_RULES = "DEFAULT"
_GROUP_REF = re.compile(r"\$(\$|\d+)")


@dataclass(frozen=True, slots=True)
class MappingRule:
    """One rule; `pattern` None is DEFAULT."""

    pattern: re.Pattern[str] | None
    replacement: str = ""
    case: str = ""  # "", "L" or "U"

    def apply(self, subject: str) -> str | None:
        """The name this rule gives `subject`, or None when it does not apply."""
        pattern = self.pattern
        if pattern is None:
            return subject
        match = pattern.fullmatch(subject)
        if match is None:
            return None

        def group(ref: re.Match[str]) -> str:
            if ref.group(1) == "$":
                return "$"
            index = int(ref.group(1))
            if index > pattern.groups:
                raise ValueError(f"rule {pattern.pattern!r} has no group ${index}")
            return match.group(index) or ""

        name = _GROUP_REF.sub(group, self.replacement)
        return name.lower() if self.case == "L" else name.upper() if self.case == "U" else name


@dataclass(frozen=True, slots=True)
class PrincipalMapper:
    """The parsed rules of one listener."""

    rules: tuple[MappingRule, ...]
    text: str

    def name_of(self, subject: str) -> str | None:
        """The principal name of a certificate subject; None when no rule applies (or the result is empty)."""
        for rule in self.rules:
            name = rule.apply(subject)
            if name is not None:
                return name or None
        return None


def parse_rules(text: str) -> PrincipalMapper:
    """Parse Kafka-style mapping rules; ValueError (one line) naming what is wrong."""
    rules: list[MappingRule] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if text.startswith("DEFAULT", i):
            rules.append(MappingRule(None))
            i += len("DEFAULT")
        elif text.startswith("RULE:", i):
            pattern, i = _until_slash(text, i + len("RULE:"))
            replacement, i = _until_slash(text, i)
            case = ""
            if i < n and text[i] in "LU":
                case, i = text[i], i + 1
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValueError(
                    f"mapping rule pattern {pattern!r} is not a regular expression: {exc}"
                ) from None
            for ref in _GROUP_REF.findall(replacement):
                if ref != "$" and int(ref) > compiled.groups:
                    raise ValueError(f"mapping rule {pattern!r} has no group ${ref} for {replacement!r}")
            rules.append(MappingRule(compiled, replacement, case))
        else:
            raise ValueError(f"mapping rules: expected DEFAULT or RULE:PATTERN/REPLACEMENT/[LU] at "
                             f"{text[i:i + 30]!r}")
        while i < n and text[i].isspace():
            i += 1
        if i == n:
            break
        if text[i] != ",":
            raise ValueError(f"mapping rules: expected ',' between rules at {text[i:i + 30]!r}")
        i += 1
    return PrincipalMapper(tuple(rules), text)


def _until_slash(text: str, i: int) -> tuple[str, int]:
    """The text up to the next unescaped '/', with '\\/' unescaped, and the index after the slash."""
    out: list[str] = []
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text) and text[i + 1] == "/":
            out.append("/")
            i += 2
        elif char == "/":
            return "".join(out), i + 1
        elif char == "\\" and i + 1 < len(text):
            out.append(text[i:i + 2])  # a regular expression escape: kept as written
            i += 2
        else:
            out.append(char)
            i += 1
    raise ValueError(f"mapping rules: a RULE is missing its closing '/' in {text!r}")
