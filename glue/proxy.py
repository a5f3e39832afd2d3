"""The sensor proxy's planning (Fjords): which samples of each mote the running query parts of an
edge node can use, as thresholds the mote checks before it sends (wire.receptor_settings). Pure.

Every part reading the node's samples sees them through the operators above its samples source;
the filters on that path (through projections, whose columns they are rewritten in, unions, which
pass rows on unchanged, and joins with static relations) are what a sample must meet to be of any
use to the part. Above any other operator (an aggregate, a pattern, smoothing, the quality stage)
every sample may count; a source's `sample every` period keeps only the samples on it. For one
mote, a part's predicate is relaxed into thresholds over the sample's quantities: its
`receptor_id` comparisons are decided for that mote, a comparison the mote cannot check
(arithmetic, time, functions, a relation's columns) holds always, and NULL compares to nothing —
so the rule keeps every sample the predicate keeps, and a mote under the union of its parts'
rules sends every sample any part could use: each query's answer is the one it gets from every
sample.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from base.plan import (
    SAMPLE_QUANTITIES,
    Aggregate,
    BinOp,
    Col,
    Expr,
    Filter,
    Func,
    Lit,
    LookupJoin,
    Match,
    Plan,
    Project,
    Qualify,
    Source,
    Union_,
    WindowJoin,
    expr_columns,
    plain_comparison,
)
from base.plan_schema import output_columns
from wire.receptor_settings import ALWAYS, COMPARISONS, EVERY, NEVER, Bound, Clause, Rule

TRUE = Lit(True)
_RELATION = "relation column"   # stands for a static relation's column above a join: no threshold of it
MAX_CLAUSES = 32   # a rule with more is sent as `always`: a mote checks few thresholds
_NEGATED = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "=": "!=", "!=": "="}


def mote_rules(plans: Iterable[Plan], motes: Iterable[str]) -> dict[str, Rule]:
    """Per mote of the node, what it sends so that every part among `plans` gets every sample it
    could use; a mote no part reads sends nothing."""
    needs = [predicate for plan in plans for predicate in sample_predicates(plan)]
    return {mote: union(rule_for(predicate, mote) for predicate in needs) for mote in motes}


def mote_fields(plans: Iterable[Plan], motes: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """Per mote, the quantities the parts that may use its samples read (() for every quantity: a
    part reads them all, or none reads the mote)."""
    every = set(SAMPLE_QUANTITIES)
    # per part reading samples: its predicates and the quantities it reads, worked out once
    reading = [(predicates, read if (read := quantities_read(plan)) is not None else every)
               for plan in plans if (predicates := sample_predicates(plan))]
    found = {}
    for mote in motes:
        wanted = set().union(*(read for predicates, read in reading
                               if any(rule_for(predicate, mote) != NEVER for predicate in predicates)))
        found[mote] = () if wanted in (set(), every) else tuple(q for q in SAMPLE_QUANTITIES if q in wanted)
    return found


def quantities_read(plan: Plan) -> set[str] | None:
    """The sample quantities a plan names anywhere (a renamed one is named where it is renamed), and
    those it passes out unnamed; None when an operator reads them all (the quality stage)."""
    if isinstance(plan, Qualify):
        return None
    names: set[str] = {name for name, _ in output_columns(plan)}

    def visit(node: Plan) -> bool:
        if isinstance(node, Qualify):
            return False
        exprs: list[Expr] = []
        if isinstance(node, Filter):
            exprs.append(node.predicate)
        elif isinstance(node, Project):
            exprs.extend(e for _, e in node.outputs)
        elif isinstance(node, Aggregate):
            names.update(node.keys)
            names.update(n for spec in node.aggregates for n in (spec.column, spec.by) if n)
            exprs.extend([node.having] if node.having is not None else [])
        elif isinstance(node, LookupJoin):
            names.add(node.on)
        elif isinstance(node, Match):
            names.update(node.partition)
            names.update(column for _, _, column in node.outputs)
            exprs.extend(c for step in node.steps for c in step.conditions)
        names.update(n for e in exprs for n in expr_columns(e))
        return isinstance(node, Source) or all(visit(child) for child in _children(node))

    return names & set(SAMPLE_QUANTITIES) if visit(plan) else None


def sample_predicates(plan: Plan, above: Expr = TRUE) -> list[Expr]:
    """For each samples source of `plan`, what a sample must meet to reach past the filters above it."""
    if isinstance(plan, Source):
        if plan.format != "samples":
            return []
        return [BinOp("AND", BinOp(EVERY, Col(plan.event_time), Lit(plan.sample_ms)), above) if plan.sample_ms
                else above]
    if isinstance(plan, Filter):
        return sample_predicates(plan.child, above if plan.predicate == TRUE else
                                 plan.predicate if above == TRUE else BinOp("AND", plan.predicate, above))
    if isinstance(plan, Project):
        return sample_predicates(plan.child, substitute(above, dict(plan.outputs)))
    if isinstance(plan, Union_):
        return [p for child in plan.children for p in sample_predicates(child, above)]
    if isinstance(plan, LookupJoin):   # what a static relation adds is nothing a mote can check
        return sample_predicates(plan.child, substitute(above, {name: Func(_RELATION, (Col(name),))
                                                                for name, _ in plan.columns}))
    return [p for child in _children(plan) for p in sample_predicates(child)]


def _children(plan: Plan) -> tuple[Plan, ...]:
    return plan.children if isinstance(plan, Union_ | WindowJoin) else (plan.child,)


def substitute(expr: Expr, definitions: Mapping[str, Expr]) -> Expr:
    """`expr` over a projection's outputs, rewritten over its input."""
    if isinstance(expr, Col):
        return definitions.get(expr.name, expr)
    if isinstance(expr, BinOp):
        return BinOp(expr.op, substitute(expr.left, definitions), substitute(expr.right, definitions))
    if isinstance(expr, Func):
        return Func(expr.name, tuple(substitute(a, definitions) for a in expr.args))
    return expr


def union(rules: Iterable[Rule]) -> Rule:
    """A sample any of `rules` wants; a clause another one covers is left out."""
    clauses: list = []
    for rule in rules:
        if () in rule:
            return ALWAYS
        clauses.extend(c for c in rule if c not in clauses)
    kept = [c for i, c in enumerate(clauses)   # of two that cover each other, the first stays
            if not any(_covers(other, c) and (not _covers(c, other) or j < i)
                       for j, other in enumerate(clauses) if j != i)]
    return ALWAYS if len(kept) > MAX_CLAUSES else tuple(kept)


def _covers(wide: Clause, narrow: Clause) -> bool:
    """Whether every sample meeting `narrow` meets `wide`: each bound of `wide` follows from one of `narrow`."""
    return all(any(_implies(n, w) for n in narrow) for w in wide)


def _implies(strong: Bound, weak: Bound) -> bool:
    (quantity, op, value), (weak_quantity, weak_op, weak_value) = strong, weak
    if op == EVERY or weak_op == EVERY:   # every 6 s is also every 2 s
        return op == weak_op == EVERY and value % weak_value == 0
    if quantity != weak_quantity:
        return False
    if op == "=":
        return COMPARISONS[weak_op](value, weak_value)
    if op == weak_op:
        return (op in ("!=",) and value == weak_value) or (op in (">", ">=") and value >= weak_value) or \
            (op in ("<", "<=") and value <= weak_value)
    if (op, weak_op) in ((">", ">="), ("<", "<=")):
        return value >= weak_value if op == ">" else value <= weak_value
    if (op, weak_op) in ((">=", ">"), ("<=", "<")):
        return value > weak_value if op == ">=" else value < weak_value
    return False


def _both(left: Rule, right: Rule) -> Rule:
    """The conjunction of two rules, in clauses."""
    clauses = []
    for a in left:
        for b in right:
            clause = tuple(dict.fromkeys(a + b))
            if clause not in clauses:
                clauses.append(clause)
    return ALWAYS if len(clauses) > MAX_CLAUSES else tuple(clauses)


def rule_for(predicate: Expr, mote: str, negated: bool = False) -> Rule:
    """Thresholds holding for every sample of `mote` for which `predicate` (negated: NOT it) is
    true, in SQL's three-valued logic (a filter keeps only true)."""
    if isinstance(predicate, Func) and predicate.name == "not":
        return rule_for(predicate.args[0], mote, not negated)
    if isinstance(predicate, Lit):
        if predicate.value is None:
            return NEVER
        return ALWAYS if bool(predicate.value) != negated else NEVER
    if not isinstance(predicate, BinOp):
        return ALWAYS
    if predicate.op in ("AND", "OR"):
        left, right = rule_for(predicate.left, mote, negated), rule_for(predicate.right, mote, negated)
        return _both(left, right) if (predicate.op == "AND") != negated else union((left, right))
    if predicate.op == EVERY:   # a source's `sample every` (sample_predicates), never under a NOT
        assert isinstance(predicate.right, Lit)
        return ALWAYS if negated else ((("", EVERY, float(predicate.right.value)),),)
    comparison = plain_comparison(predicate)
    if comparison is None:
        return ALWAYS
    left, op, right = comparison
    op = _NEGATED[op] if negated else op
    if (isinstance(left, Lit) and left.value is None) or (isinstance(right, Lit) and right.value is None):
        return NEVER   # NULL compares to nothing, negated or not
    if isinstance(left, Col) and isinstance(right, Lit):
        if left.name == "receptor_id" and isinstance(right.value, str):
            return ALWAYS if COMPARISONS[op](mote, right.value) else NEVER
        number = isinstance(right.value, int | float) and not isinstance(right.value, bool)
        if left.name in SAMPLE_QUANTITIES and number:
            return (((left.name, op, float(right.value)),),)
    return ALWAYS
