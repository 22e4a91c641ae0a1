"""Renderers: `Renderer.render(program) -> str`, with capabilities as data (`RendererOptions`)."""
from fast.renderer.base import Renderer, RendererOptions

__all__ = ["Renderer", "RendererOptions"]
