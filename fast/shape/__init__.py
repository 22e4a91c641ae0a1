"""Shape tracking: symbolic integers (`symbolic`), arithmetic on possibly symbolic sizes (`sizes`),
single strided views (`view`) and view stacks (`shapetracker`)."""
from fast.shape.shapetracker import ShapeTracker
from fast.shape.sizes import strides_for_shape
from fast.shape.symbolic import Node, NumNode, Variable, sint, sint_prod
from fast.shape.view import View

__all__ = ["Node", "NumNode", "ShapeTracker", "Variable", "View", "sint", "sint_prod", "strides_for_shape"]
