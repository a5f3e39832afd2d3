"""HiFi SQL text -> syntax tree (glue.sql.ast), by recursive descent. Pure.

    statement  := CREATE VIEW name AS ( select ) | select          [;]
    select     := SELECT (* | item {, item}) FROM source {JOIN source (USING (cols) | ON expr)}
                  [WHERE expr] [GROUP BY name {, name}] [HAVING expr]
    source     := name [[AS] alias] ['[' RANGE BY 'D' [, SLIDE BY 'D'] ']'] [[AS] alias]
    expr       := or;  or := and {OR and};  and := not {AND not};  not := [NOT] cmp
    cmp        := sum [(= | != | < | <= | > | >=) (ALL ( select ) | sum) | [NOT] IN ( expr, ... )
                  | [NOT] BETWEEN sum AND sum]
    sum        := term {(+|-) term};  term := unary {(*|/) unary};  unary := [-] atom
    atom       := number | 'string' | TRUE | FALSE | name[.name] | agg ( [DISTINCT] expr | * ) | ( expr )
                  | INTERVAL 'n' unit | INTERVAL 'n units'

`x BETWEEN lo AND hi` is read as `x >= lo AND x <= hi` (both ends included, as in SQL).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from typing import TypeVar

from glue.limits import DEFAULT_LIMITS, Limits, check_name
from glue.sql import ast
from glue.sql.lexer import Pos, SqlError, Token, tokenize

T = TypeVar("T")

# tag_estimate(tag) and its 95 % interval's ends: base.tag_count (the tags in range, read or not)
TAG_ESTIMATES = ("tag_estimate", "tag_estimate_low", "tag_estimate_high")
AGGREGATE_NAMES = ("count", "sum", "min", "max", "avg", *TAG_ESTIMATES)
SCALAR_FUNCTIONS = ("product", "indicator")   # of an EPC URI: base.plan.FUNCTIONS says what each gives
COMPARISONS = ("=", "!=", "<", "<=", ">", ">=")
INTERVAL_UNITS = ("millisecond", "second", "minute", "hour", "day")   # and their plurals


class _Parser:
    def __init__(self, text: str, max_nesting: int) -> None:
        self.tokens = tokenize(text)
        self.i = 0
        self.depth = 0
        self.max_nesting = max_nesting

    def _deeper(self, tok: Token) -> None:
        """One more level of recursion (an expression, NOT, unary minus): refused past the limit,
        long before Python's own recursion limit."""
        self.depth += 1
        if self.depth > self.max_nesting:
            raise SqlError(f"nesting deeper than {self.max_nesting} levels is not admitted (parameter limit_nesting)",
                           tok.pos.line, tok.pos.column)

    # ------------------------------------------------------------ token helpers

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def _fail(self, what: str, tok: Token | None = None) -> SqlError:
        tok = tok or self.tok
        found = "end of query" if tok.kind == "end" else repr(tok.text)
        return SqlError(f"expected {what}, found {found}", tok.pos.line, tok.pos.column)

    def _is(self, kind: str, text: str | None = None) -> bool:
        return self.tok.kind == kind and (text is None or self.tok.text == text)

    def _accept(self, kind: str, text: str | None = None) -> Token | None:
        if self._is(kind, text):
            tok = self.tok
            self.i += 1
            return tok
        return None

    def _expect(self, kind: str, text: str | None = None, what: str | None = None) -> Token:
        tok = self._accept(kind, text)
        if tok is None:
            raise self._fail(what or (text if text else kind))
        return tok

    def _ident(self, what: str) -> Token:
        return self._expect("ident", what=what)

    def _comma_list(self, one: Callable[[], T]) -> list[T]:
        """`one (, one)*`."""
        found = [one()]
        while self._accept("symbol", ","):
            found.append(one())
        return found

    # ------------------------------------------------------------ statements

    def statement(self) -> ast.Statement:
        if self._is("keyword", "CREATE"):
            start = self.tok.pos
            self.i += 1
            self._expect("keyword", "VIEW")
            name_tok = self._ident("a view name")
            name = name_tok.text
            check_name(name, "view", name_tok.pos)
            self._expect("keyword", "AS")
            parenthesized = self._accept("symbol", "(") is not None
            select = self.select()
            if parenthesized:
                self._expect("symbol", ")")
            result: ast.Statement = ast.CreateView(name, select, start, name_tok.pos)
        else:
            result = self.select()
        self._accept("symbol", ";")
        if not self._is("end"):
            raise self._fail("end of query")
        return result

    def select(self) -> ast.Select:
        start = self._expect("keyword", "SELECT", "SELECT").pos
        items: list[ast.SelectItem] = [] if self._accept("symbol", "*") else self._comma_list(self.item)
        self._expect("keyword", "FROM", "FROM")
        source = self.source()
        joins = []
        while self._is("keyword", "JOIN"):
            join_pos = self.tok.pos
            self.i += 1
            joined = self.source()
            if self._accept("keyword", "USING"):
                self._expect("symbol", "(")
                cols = self._comma_list(lambda: self._ident("a column name").text)
                self._expect("symbol", ")")
                joins.append(ast.JoinClause(joined, tuple(cols), None, join_pos))
            elif self._accept("keyword", "ON"):
                joins.append(ast.JoinClause(joined, (), self.expr(), join_pos))
            else:
                raise self._fail("USING or ON")
        where = self.expr() if self._accept("keyword", "WHERE") else None
        group_by: list[ast.Name] = []
        if self._accept("keyword", "GROUP"):
            self._expect("keyword", "BY")
            group_by = self._comma_list(self.name)
        having = self.expr() if self._accept("keyword", "HAVING") else None
        pattern = self.pattern() if self._is("ident", "pattern") else None
        changes = self.changes() if self._is("ident", "emit") else None
        return ast.Select(tuple(items), source, tuple(joins), where, tuple(group_by), having, start, pattern,
                          changes)

    def changes(self) -> ast.ChangesClause:
        """`EMIT CHANGES [BY col, ...]` (words, not keywords: they stay usable as names)."""
        pos = self._expect("ident", "emit").pos
        self._expect("ident", "changes", "CHANGES (EMIT CHANGES [BY col, ...])")
        by = self._comma_list(self.name) if self._accept("keyword", "BY") else []
        return ast.ChangesClause(tuple(by), pos)

    def pattern(self) -> ast.PatternClause:
        """`PATTERN SEQ(step, ...) [WITHIN 'T'] [PARTITION BY col, ...] DEFINE name AS cond, ...`; a
        step is `name`, `NOT name` or `AND(name, name, ...)`. Its words are not keywords: they stay
        usable as names."""
        pos = self._expect("ident", "pattern").pos
        self._expect("ident", "seq", "SEQ(...)")
        self._expect("symbol", "(")
        steps = self._comma_list(self._step)
        self._expect("symbol", ")")
        within = self._expect("string", what="a quoted duration such as '30 seconds'") \
            if self._accept("ident", "within") else None
        partition: list[ast.Name] = []
        if self._accept("ident", "partition"):
            self._expect("keyword", "BY")
            partition = self._comma_list(self.name)
        self._expect("ident", "define", "DEFINE")
        defines = self._comma_list(self._define)
        return ast.PatternClause(tuple(steps), within.text if within else None, within.pos if within else None,
                                 tuple(partition), tuple(defines), pos)

    def _step(self) -> ast.PatternStep:
        pos = self.tok.pos
        if self._accept("keyword", "NOT"):
            return ast.PatternStep((self._ident("a step name").text,), True, pos)
        if self._accept("keyword", "AND"):
            self._expect("symbol", "(")
            names = self._comma_list(lambda: self._ident("a step name").text)
            self._expect("symbol", ")")
            return ast.PatternStep(tuple(names), False, pos)
        return ast.PatternStep((self._ident("a step name, NOT name or AND(name, ...)").text,), False, pos)

    def _define(self) -> ast.Define:
        tok = self._ident("a step name")
        self._expect("keyword", "AS")
        return ast.Define(tok.text, self.expr(), tok.pos)

    def item(self) -> ast.SelectItem:
        pos = self.tok.pos
        expr = self.expr()
        alias = None
        if self._accept("keyword", "AS"):
            alias = self._ident("an alias").text
        elif self._is("ident"):
            alias = self._accept("ident").text
        return ast.SelectItem(expr, alias, pos)

    def source(self) -> ast.SourceRef:
        tok = self._ident("a stream, view or relation name")
        alias = self._alias()
        window = self.window() if self._is("symbol", "[") else None
        alias = alias or self._alias()
        return ast.SourceRef(tok.text, alias, window, tok.pos)

    def _alias(self) -> str | None:
        if self._accept("keyword", "AS"):
            return self._ident("an alias").text
        if self._is("ident", "pattern") or self._is("ident", "emit"):   # the clause that follows, not an alias
            return None
        tok = self._accept("ident")
        return tok.text if tok else None

    def window(self) -> ast.WindowClause:
        pos = self._expect("symbol", "[").pos
        if self._accept("ident", "adaptive"):
            return self._adaptive(pos)
        self._expect("keyword", "RANGE", "RANGE BY (or ADAPTIVE EPOCH)")
        self._expect("keyword", "BY")
        range_tok = self._expect("string", what="a quoted duration such as '5 seconds'")
        slide_tok = sample_tok = approximate_tok = None
        while self._accept("symbol", ","):
            if approximate_tok is None and (found := self._accept("ident", "approximate")):
                approximate_tok = found
                continue
            if sample_tok is None and self._accept("ident", "sample"):   # a word, not a keyword
                self._expect("ident", "every", "EVERY")
                sample_tok = self._expect("string", what="a quoted duration such as '10 seconds'")
                continue
            if slide_tok is not None or sample_tok is not None:
                self._expect("ident", "sample", "SAMPLE EVERY (or APPROXIMATE)")
            self._expect("keyword", "SLIDE", "SLIDE BY (or SAMPLE EVERY, APPROXIMATE)")
            self._expect("keyword", "BY")
            slide_tok = self._expect("string", what="a quoted duration such as '1 second'")
        self._expect("symbol", "]")
        return ast.WindowClause(range_tok.text, slide_tok.text if slide_tok else None, pos, range_tok.pos,
                                slide_tok.pos if slide_tok else None, sample=sample_tok.text if sample_tok else None,
                                sample_pos=sample_tok.pos if sample_tok else None,
                                approximate_pos=approximate_tok.pos if approximate_tok else None)

    def _adaptive(self, pos) -> ast.WindowClause:
        """`[adaptive epoch 'E' (, delta D)]`: per-tag adaptive smoothing (words, not keywords:
        `epoch` and `delta` stay usable as names)."""
        self._expect("ident", "epoch", "EPOCH")
        epoch = self._expect("string", what="a quoted duration such as '1 second'")
        delta = delta_pos = None
        if self._accept("symbol", ","):
            self._expect("ident", "delta", "DELTA")
            tok = self._expect("number", what="a number such as 0.25")
            delta, delta_pos = float(tok.text), tok.pos
        self._expect("symbol", "]")
        return ast.WindowClause(epoch.text, None, pos, epoch.pos, None, True, delta, delta_pos)

    def name(self) -> ast.Name:
        tok = self._ident("a column name")
        if self._accept("symbol", "."):
            column = self._ident("a column name after '.'")
            return ast.Name(column.text, tok.text, tok.pos)
        return ast.Name(tok.text, None, tok.pos)

    # ------------------------------------------------------------ expressions

    def _left_assoc(self, operand, kind: str, ops: tuple[str, ...]) -> ast.Node:
        """operand {op operand}, grouping to the left."""
        left = operand()
        chain = 0
        while self.tok.kind == kind and self.tok.text in ops:
            op = self.tok
            chain += 1
            if chain > 4 * self.max_nesting:   # refused here, before a long chain is parsed to its end
                raise SqlError(f"a chain of more than {4 * self.max_nesting} {op.text} is not admitted "
                               f"(4 x parameter limit_nesting)", op.pos.line, op.pos.column)
            self.i += 1
            left = ast.Binary(op.text, left, operand(), op.pos)
        return left

    def expr(self) -> ast.Node:
        self._deeper(self.tok)
        try:
            return self._left_assoc(self._and, "keyword", ("OR",))
        finally:
            self.depth -= 1

    def _and(self) -> ast.Node:
        return self._left_assoc(self._not, "keyword", ("AND",))

    def _not(self) -> ast.Node:
        if self._is("keyword", "NOT"):
            pos = self.tok.pos
            self._deeper(self.tok)
            self.i += 1
            try:
                return ast.Unary("NOT", self._not(), pos)
            finally:
                self.depth -= 1
        return self._comparison()

    def _comparison(self) -> ast.Node:
        left = self._sum()
        if self.tok.kind == "symbol" and self.tok.text in COMPARISONS:
            op_tok = self.tok
            self.i += 1
            if self._accept("keyword", "ALL"):
                self._expect("symbol", "(")
                sub = self.select()
                self._expect("symbol", ")")
                return ast.CompareAll(op_tok.text, left, sub, op_tok.pos)
            return ast.Binary(op_tok.text, left, self._sum(), op_tok.pos)
        negated_pos = self.tok.pos
        negated = False
        if self._is("keyword", "NOT") and self.tokens[self.i + 1].kind == "keyword" \
                and self.tokens[self.i + 1].text in ("IN", "BETWEEN"):
            self.i += 1
            negated = True
        if self._is("keyword", "BETWEEN"):
            between = self._between(left)
            return ast.Unary("NOT", between, negated_pos) if negated else between
        if self._accept("keyword", "IN"):
            self._expect("symbol", "(")
            values = [self._sum()]
            while self._accept("symbol", ","):
                values.append(self._sum())
            self._expect("symbol", ")")
            return ast.InList(left, tuple(values), negated, negated_pos)
        return left

    def _between(self, operand: ast.Node) -> ast.Node:
        """`operand BETWEEN low AND high` as `operand >= low AND operand <= high`."""
        pos = self._expect("keyword", "BETWEEN").pos
        low = self._sum()
        self._expect("keyword", "AND", "AND (BETWEEN low AND high)")
        high = self._sum()
        return ast.Binary("AND", ast.Binary(">=", operand, low, pos), ast.Binary("<=", operand, high, pos), pos)

    def _sum(self) -> ast.Node:
        return self._left_assoc(self._term, "symbol", ("+", "-"))

    def _term(self) -> ast.Node:
        return self._left_assoc(self._unary, "symbol", ("*", "/"))

    def _unary(self) -> ast.Node:
        if self._is("symbol", "-"):
            pos = self.tok.pos
            self._deeper(self.tok)
            self.i += 1
            operand = self._unary()
            self.depth -= 1
            if isinstance(operand, ast.Literal) and isinstance(operand.value, int | float):
                return ast.Literal(-operand.value, pos)
            return ast.Unary("-", operand, pos)
        return self._atom()

    def _atom(self) -> ast.Node:
        tok = self.tok
        if tok.kind == "number":
            self.i += 1
            try:
                value = float(tok.text) if "." in tok.text else int(tok.text)
            except ValueError:
                raise SqlError(f"malformed number {tok.text!r}", tok.pos.line, tok.pos.column) from None
            if not _representable(value):   # every tier computes in 64 bits (Arrow, protobuf, Spark)
                raise SqlError(f"{tok.text} is out of range: a whole number is at most {INT64_MAX}, a decimal "
                               "a finite double", tok.pos.line, tok.pos.column)
            return ast.Literal(value, tok.pos)
        if tok.kind == "string":
            self.i += 1
            return ast.Literal(tok.text, tok.pos)
        if tok.kind == "keyword" and tok.text in ("TRUE", "FALSE"):
            self.i += 1
            return ast.Literal(tok.text == "TRUE", tok.pos)
        if self._accept("symbol", "("):
            inner = self.expr()
            self._expect("symbol", ")")
            return inner
        if tok.kind == "ident" and tok.text == "interval" and self.tokens[self.i + 1].kind == "string":
            return self._interval()
        if tok.kind == "ident" and self.tokens[self.i + 1].kind == "symbol" and self.tokens[self.i + 1].text == "(":
            return self._call()
        if tok.kind == "ident":
            return self.name()
        raise self._fail("a value, column or aggregate")

    def _interval(self) -> ast.Interval:
        """`INTERVAL '30' SECOND` (Flink's, a unit word after the number) or `INTERVAL '30 seconds'`;
        `interval` is a word, not a keyword: it stays usable as a name."""
        pos = self._expect("ident", "interval").pos
        amount = self._expect("string", what="a quoted duration such as '30' SECOND")
        unit = self.tok.text if self.tok.kind == "ident" and self.tok.text.rstrip("s") in INTERVAL_UNITS else None
        if unit is not None:
            self.i += 1
        return ast.Interval(f"{amount.text} {unit}" if unit else amount.text, pos)

    def _call(self) -> ast.Call:
        tok = self._ident("a function name")
        if tok.text not in AGGREGATE_NAMES + SCALAR_FUNCTIONS:
            raise SqlError(f"unknown function {tok.text!r} (aggregates: {', '.join(AGGREGATE_NAMES)}; "
                           f"functions: {', '.join(SCALAR_FUNCTIONS)})", tok.pos.line, tok.pos.column)
        self._expect("symbol", "(")
        if self._accept("symbol", "*"):
            if tok.text != "count":
                raise SqlError(f"{tok.text}(*) is not defined; only count(*)", tok.pos.line, tok.pos.column)
            self._expect("symbol", ")")
            return ast.Call("count", None, False, tok.pos)
        distinct = self._accept("keyword", "DISTINCT") is not None
        arg = self.expr()
        self._expect("symbol", ")")
        return ast.Call(tok.text, arg, distinct, tok.pos)


INT64_MAX = 2**63 - 1


def _representable(value: int | float) -> bool:
    """Whether a literal fits the 64-bit numbers every tier computes with (its sign comes after:
    -2**63 is refused, a bound no reading reaches).

    >>> _representable(2**63 - 1), _representable(2**63), _representable(float("1e308")), _representable(1e309)
    (True, False, True, False)
    """
    return value <= INT64_MAX if isinstance(value, int) else math.isfinite(value)


def parse(text: str, limits: Limits = DEFAULT_LIMITS) -> ast.Statement:
    """Parse one HiFi SQL statement; SqlError names the line, the column and the problem (also
    a text longer, or nested deeper, than `limits` admit)."""
    if not text.strip():
        raise SqlError("empty query", 1, 1)
    limits.check_text(text)
    statement = _Parser(text, limits.nesting).statement()
    _check_tree_depth(statement, limits.nesting * 4)
    return statement


def _check_tree_depth(statement: ast.Statement, limit: int) -> None:
    """Refuse a tree deeper than `limit` (a long chain of + or AND is flat text but a deep tree,
    and every later pass walks it recursively). Iterative, so it cannot itself overflow."""
    stack: list[tuple[object, int]] = [(statement, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            pos = getattr(node, "pos", None)
            raise SqlError(f"the expression tree is deeper than {limit} levels (4 x parameter limit_nesting)",
                           pos.line if pos else 1, pos.column if pos else 1)
        for f in fields(node):   # type: ignore[arg-type]
            value = getattr(node, f.name)
            for child in value if isinstance(value, tuple) else (value,):
                if is_dataclass(child) and not isinstance(child, Pos):
                    stack.append((child, depth + 1))
