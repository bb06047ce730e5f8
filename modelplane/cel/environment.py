"""The celpy side: DRA functions, the ``device`` value, evaluation."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

from celpy import celtypes
from celpy.evaluation import Activation, CELEvalError, Evaluator, base_functions
from lark import Tree

from modelplane.cel.device import Device
from modelplane.cel.quantity import Quantity, is_quantity, parse_quantity
from modelplane.cel.semver import Semver, is_semver, parse_semver
from modelplane.errors import UserError

__all__ = ["FUNCTIONS", "GLOBAL_FUNCTIONS", "MACROS", "METHODS", "cel_device", "evaluate"]


# --- argument helpers -----------------------------------------------------------------------
def _string(value: Any, what: str) -> str:
    if isinstance(value, str):
        return value
    raise TypeError(f"{what} expects a string, got {type(value).__name__}")


def _flag(value: Any, what: str) -> bool:
    if isinstance(value, celtypes.BoolType | bool):
        return bool(value)
    raise TypeError(f"{what} expects a bool, got {type(value).__name__}")


def _quantity(value: Any, what: str) -> Quantity:
    if isinstance(value, Quantity):
        return value
    raise TypeError(f"{what} expects a quantity, got {type(value).__name__}")


def _int_arg(value: Any, what: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool | celtypes.BoolType):
        return int(value)
    raise TypeError(f"{what} expects a quantity or an int, got {type(value).__name__}")


def _ordered_pair(a: Any, b: Any, what: str) -> tuple[Quantity, Quantity] | tuple[Semver, Semver]:
    if isinstance(a, Quantity) and isinstance(b, Quantity):
        return a, b
    if isinstance(a, Semver) and isinstance(b, Semver):
        return a, b
    raise TypeError(f"{what}: no overload for {type(a).__name__}, {type(b).__name__}")


# --- Kubernetes quantity library ------------------------------------------------------------
def cel_quantity(text: Any) -> Quantity:
    """quantity(string)"""
    return parse_quantity(_string(text, "quantity()"))


def cel_is_quantity(text: Any) -> celtypes.BoolType:
    """isQuantity(string)"""
    return celtypes.BoolType(is_quantity(_string(text, "isQuantity()")))


def cel_sign(q: Any) -> celtypes.IntType:
    """<Quantity>.sign()"""
    return celtypes.IntType(_quantity(q, "sign()").sign())


def cel_is_integer(q: Any) -> celtypes.BoolType:
    """<Quantity>.isInteger()"""
    return celtypes.BoolType(_quantity(q, "isInteger()").is_integer())


def cel_as_integer(q: Any) -> celtypes.IntType:
    """<Quantity>.asInteger(); an error if not an int64."""
    return celtypes.IntType(_quantity(q, "asInteger()").as_integer())


def cel_as_approximate_float(q: Any) -> celtypes.DoubleType:
    """<Quantity>.asApproximateFloat()"""
    return celtypes.DoubleType(_quantity(q, "asApproximateFloat()").as_approximate_float())


def cel_add(q: Any, other: Any) -> Quantity:
    """<Quantity>.add(<Quantity> | <int>)"""
    q = _quantity(q, "add()")
    return q.add(other if isinstance(other, Quantity) else _int_arg(other, "add()"))


def cel_sub(q: Any, other: Any) -> Quantity:
    """<Quantity>.sub(<Quantity> | <int>)"""
    q = _quantity(q, "sub()")
    return q.sub(other if isinstance(other, Quantity) else _int_arg(other, "sub()"))


# --- shared by quantity and semver ------------------------------------------------------------
def cel_compare_to(a: Any, b: Any) -> celtypes.IntType:
    """<Quantity|Semver>.compareTo(same type) -> -1, 0, 1"""
    x, y = _ordered_pair(a, b, "compareTo()")
    return celtypes.IntType(x.compare(y))  # type: ignore[arg-type]


def cel_is_greater_than(a: Any, b: Any) -> celtypes.BoolType:
    """<Quantity|Semver>.isGreaterThan(same type)"""
    x, y = _ordered_pair(a, b, "isGreaterThan()")
    return celtypes.BoolType(x.compare(y) > 0)  # type: ignore[arg-type]


def cel_is_less_than(a: Any, b: Any) -> celtypes.BoolType:
    """<Quantity|Semver>.isLessThan(same type)"""
    x, y = _ordered_pair(a, b, "isLessThan()")
    return celtypes.BoolType(x.compare(y) < 0)  # type: ignore[arg-type]


# --- Kubernetes semver library ---------------------------------------------------------------
def cel_semver(text: Any, normalize: Any = False) -> Semver:
    """semver(string[, normalize bool])"""
    return parse_semver(_string(text, "semver()"), _flag(normalize, "semver()"))


def cel_is_semver(text: Any, normalize: Any = False) -> celtypes.BoolType:
    """isSemver(string[, normalize bool])"""
    return celtypes.BoolType(is_semver(_string(text, "isSemver()"), _flag(normalize, "isSemver()")))


def _semver(v: Any, what: str) -> Semver:
    if isinstance(v, Semver):
        return v
    raise TypeError(f"{what} expects a semver, got {type(v).__name__}")


def cel_major(v: Any) -> celtypes.IntType:
    """<Semver>.major()"""
    return celtypes.IntType(_semver(v, "major()").major)


def cel_minor(v: Any) -> celtypes.IntType:
    """<Semver>.minor()"""
    return celtypes.IntType(_semver(v, "minor()").minor)


def cel_patch(v: Any) -> celtypes.IntType:
    """<Semver>.patch()"""
    return celtypes.IntType(_semver(v, "patch()").patch)


# --- operators: Quantity and Semver only compare for equality ---------------------------------
# Kubernetes' CEL has no ordering overloads for either ("no matching overload for '_>=_'
# applied to '(any, kubernetes.Semver)'"): they are ordered with compareTo and friends.
_Op = Callable[[Any, Any], Any]


def _relation(name: str, ordering: bool) -> _Op:
    standard = base_functions[name]

    def relation(a: Any, b: Any) -> Any:
        if isinstance(a, CELEvalError):
            return a
        if isinstance(b, CELEvalError):
            return b
        special_a = isinstance(a, Quantity | Semver)
        special_b = isinstance(b, Quantity | Semver)
        if special_a or special_b:
            if type(a) is not type(b):
                raise TypeError(f"no such overload: {type(a).__name__} {name} {type(b).__name__}")
            if ordering and isinstance(a, Quantity):
                raise TypeError("quantities are ordered with compareTo, isGreaterThan, isLessThan")
            if ordering and isinstance(a, Semver):
                raise TypeError(
                    "semantic versions are ordered with compareTo, isGreaterThan, isLessThan "
                    '(e.g. v.compareTo(semver("9.0.0")) >= 0)'
                )
        return standard(a, b)

    relation.__name__ = f"relation{name}"
    return relation


#: Functions called as ``f(x)``.
GLOBAL_FUNCTIONS: Final[dict[str, Callable[..., Any]]] = {
    "quantity": cel_quantity,
    "isQuantity": cel_is_quantity,
    "semver": cel_semver,
    "isSemver": cel_is_semver,
}
#: Functions called as ``x.f()``.
METHODS: Final[dict[str, Callable[..., Any]]] = {
    "sign": cel_sign,
    "isInteger": cel_is_integer,
    "asInteger": cel_as_integer,
    "asApproximateFloat": cel_as_approximate_float,
    "add": cel_add,
    "sub": cel_sub,
    "compareTo": cel_compare_to,
    "isGreaterThan": cel_is_greater_than,
    "isLessThan": cel_is_less_than,
    "major": cel_major,
    "minor": cel_minor,
    "patch": cel_patch,
}
#: Comprehension macros (``list.all(x, p)``); ``has`` and ``dyn`` are global macros.
MACROS: Final = frozenset({"all", "exists", "exists_one", "map", "filter"})

#: Everything registered with celpy, on top of its standard functions.
FUNCTIONS: Final[dict[str, Callable[..., Any]]] = {
    **base_functions,
    **GLOBAL_FUNCTIONS,
    **METHODS,
    "_<_": _relation("_<_", True),
    "_<=_": _relation("_<=_", True),
    "_>_": _relation("_>_", True),
    "_>=_": _relation("_>=_", True),
    "_==_": _relation("_==_", False),
    "_!=_": _relation("_!=_", False),
}


# --- the device value ------------------------------------------------------------------------
_EMPTY: Final = celtypes.MapType()


class DomainMap(celtypes.MapType):
    """``device.attributes`` / ``device.capacity``: an unknown domain reads as an empty map,
    yet ``"x.com" in device.attributes`` stays false."""

    def __getitem__(self, key: Any) -> Any:
        try:
            return super().__getitem__(key)
        except KeyError:
            if isinstance(key, str):
                return _EMPTY
            raise


def _cel_value(value: Any) -> Any:
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, str):
        return celtypes.StringType(value)
    return value  # Semver, Quantity


def _domains(table: Any) -> DomainMap:
    return DomainMap(
        {
            celtypes.StringType(domain): celtypes.MapType(
                {celtypes.StringType(k): _cel_value(v) for k, v in values.items()}
            )
            for domain, values in table.items()
        }
    )


def cel_device(device: Device) -> celtypes.MapType:
    """The CEL ``device`` value (built once per Device, then cached on it)."""
    cached = device._cel
    if cached is None:
        cached = celtypes.MapType(
            {
                celtypes.StringType("driver"): celtypes.StringType(device.driver),
                celtypes.StringType("attributes"): _domains(device.attributes),
                celtypes.StringType("capacity"): _domains(device.capacity),
            }
        )
        object.__setattr__(device, "_cel", cached)
    return cached


_RELATIONS: Final = {
    "relation_lt": "_<_",
    "relation_le": "_<=_",
    "relation_gt": "_>_",
    "relation_ge": "_>=_",
    "relation_eq": "_==_",
    "relation_ne": "_!=_",
    "relation_in": "_in_",
}


# Method names celpy's member_dot_arg treats as macros.
_CELPY_MACROS: Final = frozenset({"map", "filter", "all", "exists", "exists_one", "reduce", "min"})


class _Evaluator(Evaluator):
    """celpy's interpreter with leaner binary operators.

    celpy's versions build ``typing`` generics (``cast(Tuple[List[Result], Result], ...)``)
    on every call, which costs more than the operator itself. Same semantics:
    both operands are evaluated, errors are values, a TypeError is "no such overload".
    """

    def _binary(self, tree: Tree, op: str, left_tree: Any, right_tree: Any) -> Any:
        func = self.activation.resolve_function(op)
        left = self.visit(left_tree)
        right = self.visit(right_tree)
        try:
            return func(left, right)
        except TypeError as ex:
            value = CELEvalError("no such overload", ex.__class__, ex.args, tree=tree)
            value.__cause__ = ex
            return value

    # The budget is CPU time of this thread, not wall time: a process that waits for a core
    # (a loaded CI machine) must not see a selector stop matching. The clock is read every
    # 16 steps, counted across the sub-evaluators of macros (shared `_budget`).
    _budget: _Budget | None = None

    def visit(self, tree: Tree) -> Any:
        budget = self._budget
        if budget is not None:
            budget.steps += 1
            if not budget.steps & 15 and time.thread_time() > budget.deadline:
                raise BudgetExceeded("CEL evaluation exceeded its time budget")
        return super().visit(tree)

    def sub_evaluator(self, ast: Tree) -> Evaluator:
        sub = _Evaluator(ast, activation=self.activation)
        sub._budget = self._budget
        return sub

    def relation(self, tree: Tree) -> Any:
        if len(tree.children) != 2:
            return super().relation(tree)
        op_tree, right = tree.children
        return self._binary(tree, _RELATIONS[op_tree.data], op_tree.children[0], right)

    def member_dot_arg(self, tree: Tree) -> Any:
        name = tree.children[1]
        if name in _CELPY_MACROS:
            return super().member_dot_arg(tree)
        member = self.visit(tree.children[0])
        args = self.visit(tree.children[2]) if len(tree.children) == 3 else None
        return self.method_eval(member, name, args)

    def conditionalor(self, tree: Tree) -> Any:
        if len(tree.children) != 2:
            return super().conditionalor(tree)
        return self._binary(tree, "_||_", tree.children[0], tree.children[1])

    def conditionaland(self, tree: Tree) -> Any:
        if len(tree.children) != 2:
            return super().conditionaland(tree)
        return self._binary(tree, "_&&_", tree.children[0], tree.children[1])


#: The CPU time (of the evaluating thread) one evaluation may take before it is abandoned
#: (a non-match). Selectors that pass the compile-time cost estimate take microseconds.
EVALUATION_BUDGET_SECONDS: Final = 0.25


class BudgetExceeded(UserError, RuntimeError):
    """An evaluation ran past its time budget."""


class _Budget:
    """One evaluation's deadline (thread CPU time) and steps, shared with its sub-evaluators."""

    __slots__ = ("deadline", "steps")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.steps = 0


def evaluate(ast: Tree, device: Device, budget: float = EVALUATION_BUDGET_SECONDS) -> Any:
    """Evaluate a compiled expression; returns the value or a CELEvalError.

    Raises BudgetExceeded when the evaluation uses more than budget seconds of CPU.
    """
    activation = Activation(vars={"device": cel_device(device)}, functions=FUNCTIONS)
    evaluator = _Evaluator(ast, activation)
    evaluator._budget = _Budget(time.thread_time() + budget)
    return evaluator.visit(ast)
