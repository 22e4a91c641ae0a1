"""Shape tracking: symbolic integers (`symbolic`), single strided views (`view`) and view stacks (`shapetracker`)."""
from fast.shape.shapetracker import ShapeTracker
from fast.shape.symbolic import Node, NumNode, Variable, sint, sint_prod
from fast.shape.view import View, strides_for_shape

__all__ = ["Node", "NumNode", "ShapeTracker", "Variable", "View", "sint", "sint_prod", "strides_for_shape"]
