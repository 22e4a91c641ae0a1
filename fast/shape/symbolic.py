"""Symbolic integer expressions used for shapes, strides and index arithmetic.

The package's names live in two modules, imported here so callers import from this one:
fast/shape/symbolic_nodes.py (the node classes and the int-or-node helpers) and
fast/shape/simplify.py (the simplifying constructors, which fill the node operators' table).

Invariants:
- Every node is immutable and hashable; equality is structural (``NumNode(3) == 3`` holds).
- ``node.min <= value <= node.max`` for every assignment of its variables inside their ranges (that
  gives every divisor a positive value: a symbolic divisor may be 0, a size that is 0 in some binding,
  and is then never evaluated).
- The node classes are raw constructors; the operators (``+ - * // % <``), ``sym_sum`` and ``sym_and``
  simplify, so user code should build expressions through them.
- Division and modulo follow Python's floor semantics, including for negative values.
"""

from fast.shape.simplify import sint_prod, sym_and, sym_sum
from fast.shape.symbolic_nodes import (
    AndNode,
    DivNode,
    LtNode,
    ModNode,
    MulNode,
    Node,
    NumNode,
    SumNode,
    Variable,
    all_int,
    as_node,
    as_sint,
    is_sint,
    sint,
)

__all__ = ["AndNode", "DivNode", "LtNode", "ModNode", "MulNode", "Node", "NumNode", "SumNode", "Variable",
           "all_int", "as_node", "as_sint", "is_sint", "sint", "sint_prod", "sym_and", "sym_sum"]
