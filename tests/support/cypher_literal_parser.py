"""Reads back the Cypher literals stream_registry.graph.cypher_literals writes (the literal tests and the fuzz
both check rendering against it)."""
from __future__ import annotations

import datetime as dt
import re

from stream_registry.graph.cypher_literals import INT64_MIN


class LiteralParser:
    """Reads back the literals this renderer writes, following Memgraph's escape rules."""

    ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "r": "\r", "t": "\t", "b": "\b", "f": "\f"}
    NUMBER = re.compile(r"-?\d+(\.\d+)?([eE]-?\d+)?")
    FUNCTIONS = {"date": dt.date.fromisoformat, "localTime": dt.time.fromisoformat,
                 "localDateTime": dt.datetime.fromisoformat, "datetime": dt.datetime.fromisoformat}

    def __init__(self, text: str):
        self.text, self.pos = text, 0

    def parse_all(self):
        value = self.value()
        assert self.pos == len(self.text), f"trailing text {self.text[self.pos:]!r}"
        return value

    def value(self):
        text, pos = self.text, self.pos
        if text.startswith('"', pos) or text.startswith("'", pos):
            return self.string()
        if text.startswith("[", pos):
            return self.sequence("[", "]", self.value)
        if text.startswith("{", pos):
            return dict(self.sequence("{", "}", self.entry))
        for word, result in (("null", None), ("true", True), ("false", False)):
            if text.startswith(word, pos):
                self.pos += len(word)
                return result
        if text.startswith(f"({INT64_MIN + 1} - 1)", pos):
            self.pos += len(f"({INT64_MIN + 1} - 1)")
            return INT64_MIN
        for name, convert in self.FUNCTIONS.items():
            if text.startswith(name + "(", pos):
                self.pos += len(name) + 1
                result = convert(self.string())
                self.expect(")")
                return result
        if text.startswith("duration(", pos):
            self.pos += len("duration(")
            fields = dict(self.sequence("{", "}", self.entry))
            self.expect(")")
            return dt.timedelta(days=fields["day"], seconds=fields["second"], microseconds=fields["microsecond"])
        match = self.NUMBER.match(text, pos)
        assert match, f"no literal at {text[pos:pos + 20]!r}"
        self.pos = match.end()
        return float(match.group()) if match.group(1) or match.group(2) else int(match.group())

    def string(self) -> str:
        quote = self.text[self.pos]
        self.pos += 1
        out = []
        while True:
            char = self.text[self.pos]
            assert char not in "\r\n", "raw line break inside a string literal"
            if char == quote:
                self.pos += 1
                return "".join(out)
            if char == "\\":
                code = self.text[self.pos + 1]
                if code in "uU":
                    width = 4 if code == "u" else 8
                    out.append(chr(int(self.text[self.pos + 2:self.pos + 2 + width], 16)))
                    self.pos += 2 + width
                else:
                    out.append(self.ESCAPES[code])
                    self.pos += 2
                continue
            assert char not in "'\"", "unescaped quote inside a string literal"
            out.append(char)
            self.pos += 1

    def comment(self):
        """A block comment (Memgraph skips it): cypher_literals puts one holding a quote around a backticked key
        that mgconsole's splitter would otherwise cut (console_safe_name)."""
        if self.text.startswith("/*", self.pos):
            self.pos = self.text.index("*/", self.pos) + 2

    def entry(self):
        self.comment()
        if self.text.startswith("`", self.pos):
            end = self.pos + 1
            while True:
                end = self.text.index("`", end)
                if self.text.startswith("``", end):
                    end += 2
                    continue
                break
            key = self.text[self.pos + 1:end].replace("``", "`")
            self.pos = end + 1
        else:
            match = re.compile(r"[A-Za-z_][A-Za-z0-9_]*").match(self.text, self.pos)
            key, self.pos = match.group(), match.end()
        self.comment()
        self.expect(": ")
        return key, self.value()

    def sequence(self, open_, close, item):
        self.expect(open_)
        items = []
        while not self.text.startswith(close, self.pos):
            if items:
                self.expect(", ")
            items.append(item())
        self.pos += 1
        return items

    def expect(self, token: str):
        assert self.text.startswith(token, self.pos), f"expected {token!r} at {self.text[self.pos:self.pos + 20]!r}"
        self.pos += len(token)
