"""Schedule templates, one module per operator; looked up by (op, target kind) or by reference.

A reference is "module:attribute" (e.g. "search_spaces.matmul:CPU"), so a builder process
can import exactly the template the tuner used, including templates outside this package.
"""

from __future__ import annotations

import importlib

from autotune.errors import AutotuneError

from .base import Template, prim_func

# (op, target kind) -> reference of the default template
DEFAULT_TEMPLATES: dict[tuple[str, str], str] = {
    ("matmul", "llvm"): "search_spaces.matmul:MATMUL_CPU",
    ("dense", "llvm"): "search_spaces.matmul:DENSE_CPU",
    ("batch_matmul", "llvm"): "search_spaces.matmul:BATCH_MATMUL_CPU",
    ("conv2d", "llvm"): "search_spaces.conv2d:CONV2D_CPU",
    ("group_conv2d", "llvm"): "search_spaces.conv2d:GROUP_CONV2D_CPU",
    ("depthwise_conv2d", "llvm"): "search_spaces.depthwise_conv2d:DEPTHWISE_CPU",
    ("matmul", "cuda"): "search_spaces.cuda_gemm:MATMUL_CUDA",
    ("dense", "cuda"): "search_spaces.cuda_gemm:DENSE_CUDA",
    ("batch_matmul", "cuda"): "search_spaces.cuda_gemm:BATCH_MATMUL_CUDA",
    ("conv2d", "cuda"): "search_spaces.cuda_conv2d:CONV2D_CUDA",
    ("group_conv2d", "cuda"): "search_spaces.cuda_conv2d:GROUP_CONV2D_CUDA",
    ("depthwise_conv2d", "cuda"): "search_spaces.cuda_depthwise:DEPTHWISE_CUDA",
}

# (op, target kind) -> template of the uKernels of a dynamic-shape kernel (run many times per call)
UKERNEL_TEMPLATES: dict[tuple[str, str], str] = {
    ("matmul", "llvm"): "search_spaces.matmul:MATMUL_UKERNEL_CPU",
}


def resolve(ref: str) -> Template:
    """Import the template a reference names."""
    module, _, attr = ref.partition(":")
    try:
        template = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as err:
        raise AutotuneError(f"cannot load template {ref!r}: {err}") from None
    if not isinstance(template, Template):
        raise AutotuneError(f"{ref!r} is not a Template")
    return template


def current_records(records):
    """The records made by the version of their template this code has, or by one it declares compatible (same
    space: `Template.compatible_versions`); a config index of another version names another config. Templates
    that no longer import are skipped."""
    templates: dict[str, Template | None] = {}
    for r in records:
        if r.input.template not in templates:
            try:
                templates[r.input.template] = resolve(r.input.template)
            except AutotuneError:
                templates[r.input.template] = None
        template = templates[r.input.template]
        if template is not None and template.reads_records_of(r.template_version):
            yield r


def default_template_ref(op: str, target_kind: str) -> str:
    try:
        return DEFAULT_TEMPLATES[(op, target_kind)]
    except KeyError:
        have = sorted(k for o, k in DEFAULT_TEMPLATES if o == op)
        raise AutotuneError(f"no {target_kind} template for {op} yet (templates exist for: {', '.join(have) or 'none'})"
                            ) from None


def ukernel_template_ref(op: str, target_kind: str) -> str:
    """Template for the uKernels of a dynamic-shape kernel: its own where one exists, else the default."""
    return UKERNEL_TEMPLATES.get((op, target_kind)) or default_template_ref(op, target_kind)


__all__ = ["DEFAULT_TEMPLATES", "UKERNEL_TEMPLATES", "Template", "current_records", "default_template_ref", "prim_func",
           "resolve", "ukernel_template_ref"]
