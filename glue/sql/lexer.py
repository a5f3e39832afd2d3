"""HiFi SQL tokens with their positions. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from wire.errors import HiFiError

KEYWORDS = {
    "SELECT", "FROM", "WHERE", "GROUP", "BY", "HAVING", "AS", "AND", "OR", "NOT", "IN", "ALL", "DISTINCT",
    "CREATE", "VIEW", "JOIN", "USING", "ON", "RANGE", "SLIDE", "TRUE", "FALSE", "NULL", "BETWEEN",
}
SYMBOLS = (">=", "<=", "!=", "<>", "=", "<", ">", "+", "-", "*", "/", "(", ")", "[", "]", ",", ".", ";")


class SqlError(HiFiError):
    """A query that cannot be parsed or planned: where (line, column) and what is wrong."""

    def __init__(self, message: str, line: int = 0, column: int = 0) -> None:
        self.message, self.line, self.column = message, line, column
        super().__init__(f"line {line}, column {column}: {message}" if line else message)


@dataclass(frozen=True)
class Pos:
    line: int
    column: int


@dataclass(frozen=True)
class Token:
    kind: str      # "keyword" | "ident" | "number" | "string" | "symbol" | "end"
    text: str      # keywords upper-cased, identifiers lower-cased, strings without quotes
    pos: Pos


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    i, line, line_start = 0, 1, 0
    while i < len(text):
        ch = text[i]
        pos = Pos(line, i - line_start + 1)
        if ch == "\n":
            i, line, line_start = i + 1, line + 1, i + 1
        elif ch.isspace():
            i += 1
        elif text.startswith("--", i):
            while i < len(text) and text[i] != "\n":
                i += 1
        elif ch.isalpha() or ch == "_":
            j = i
            while j < len(text) and (text[j].isalnum() or text[j] == "_"):
                j += 1
            word = text[i:j]
            kind = "keyword" if word.upper() in KEYWORDS else "ident"
            tokens.append(Token(kind, word.upper() if kind == "keyword" else word.lower(), pos))
            i = j
        elif ch.isdigit():
            j = i
            while j < len(text) and (text[j].isdigit() or text[j] == "."):
                j += 1
            tokens.append(Token("number", text[i:j], pos))
            i = j
        elif ch in "'\u2018\u2019\"`":
            close = {"'": "'", "\u2018": "\u2019", "\u2019": "\u2019", '"': '"', "`": "`"}[ch]
            j = text.find(close, i + 1)
            if ch == "\u2018" and j < 0:
                j = text.find("'", i + 1)
            if j < 0:
                raise SqlError("unterminated quoted text", pos.line, pos.column)
            kind = "string" if ch not in '"`' else "ident"
            tokens.append(Token(kind, text[i + 1:j] if kind == "string" else text[i + 1:j].lower(), pos))
            i = j + 1
        else:
            symbol = next((s for s in SYMBOLS if text.startswith(s, i)), None)
            if symbol is None:
                raise SqlError(f"unexpected character {ch!r}", pos.line, pos.column)
            tokens.append(Token("symbol", "!=" if symbol == "<>" else symbol, pos))
            i += len(symbol)
    tokens.append(Token("end", "", Pos(line, len(text) - line_start + 1)))
    return tokens
