"""Schedule templates, one module per operator family and target kind.

Each operator names its templates by reference ("module:attribute", e.g. "search_spaces.matmul:MATMUL_CPU") in
its definition (`autotune.operators`); `autotune.templates` holds the `Template` interface and resolves
references. The names below are re-exported from there for code written against `search_spaces`.
"""

from __future__ import annotations

from autotune.operators import default_template_ref, ukernel_template_ref
from autotune.templates import Template, prim_func, resolve, space_of

__all__ = ["Template", "default_template_ref", "prim_func", "resolve", "space_of", "ukernel_template_ref"]
