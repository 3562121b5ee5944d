"""Conveyor: tensor computation whose storage and compute backends (carriers) are plugins.

``import conveyor`` loads no plugin and no heavy dependency: carriers are discovered through the
``conveyor.plugins`` entry-point group on first need (a tensor naming a carrier, the CLI).
"""

# The package is stacked in parts (docs/architecture.md): types, engine, plugins, lib, array_api,
# cli, with the carrier author's surface in ``conveyor.sdk``. This module re-exports the user
# API and connects the engine to the two layers above it that it reads at run time: the plugin
# host and the user library. ``conveyor.array_api`` and the plugin host ``conveyor.plugins``
# (with pluggy) load on first access (``__getattr__`` below, ``Tensor.__array_namespace__``, or
# the first carrier looked up by name); importing the rest loads no NumPy.
from __future__ import annotations

import importlib as _importlib
import sys as _sys
from types import ModuleType as _ModuleType
from typing import TYPE_CHECKING as _TYPE_CHECKING

# Imported for its effect: it registers the built-in operation definitions.
from conveyor.engine import builtin_operations as _builtin_operations  # noqa: F401
from conveyor.engine import library as _library
from conveyor.engine import plugin_access as _plugin_access
from conveyor.engine.autograd import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from conveyor.engine.carrier import Carrier, DependentCarrier, closed_carrier, is_closed_carrier
from conveyor.engine.carrier_registry import (
    CarrierDefinition,
    adopt_storage,
    definition_capabilities,
    register_carrier_definition,
    register_kernel_pack,
    storage_handle,
)
from conveyor.engine.functional import (
    abs,  # operation names shadow builtins on purpose, as in NumPy
    add,
    argmax,
    argmin,
    as_strided,
    broadcast_to,
    ceil,
    clamp,
    conv_general,
    cos,
    cumsum,
    div,
    eigh,
    elementwise_mul,
    elu,
    eq,
    erf,
    exp,
    exp2,
    floor,
    gather,
    gelu,
    le,
    leaky_relu,
    log,
    log2,
    logical_not,
    lt,
    matmul,
    maximum,
    minimum,
    mul,
    ne,
    neg,
    permute,
    pow,  # operation names shadow builtins on purpose, as in NumPy
    rearrange,
    recip,
    reduce_max,
    reduce_min,
    reduce_prod,
    reduce_sum,
    relu,
    rem,
    reshape,
    round,  # operation names shadow builtins on purpose, as in NumPy
    rsqrt,
    scatter,
    scatter_add,
    select,
    sigmoid,
    sign,
    silu,
    sin,
    softplus,
    sort,
    sqrt,
    squeeze,
    sub,
    svd,
    tanh,
    topk,
    unsqueeze,
    view,
)
from conveyor.engine.move import MoveRoute, move, move_route, move_routes, register_move_route
from conveyor.engine.operation import Operation, execute_lowered
from conveyor.engine.operation_definitions import (
    NON_DIFFERENTIABLE,
    BoundCall,
    OperationDefinition,
    ResolvedInvocation,
    ResultSpec,
    define_operation,
    operation_definition,
    operation_definitions,
)
from conveyor.engine.profiling import OperationRecord, Profiler, add_observer, profile
from conveyor.engine.progress import progress
from conveyor.engine.providers import (
    CarrierFacet,
    CompositeProvider,
    KernelExecutionInterface,
    KernelPack,
    KernelPattern,
    KernelProvider,
    PreparedComposite,
    ProviderCompletion,
    ProviderContractError,
    ProviderResult,
    StorageProvider,
    TransferProvider,
    TransferRoute,
    Unsupported,
)
from conveyor.engine.tensor import (
    Subtensor,
    Tensor,
    arange,
    default_carrier,
    empty,
    full,
    get_default_carrier,
    ones,
    ones_like,
    set_default_carrier,
    tensor,
    zeros,
    zeros_like,
)
from conveyor.lib import einops_hook as _einops_hook
from conveyor.types.capabilities import (
    CapabilitySet,
    OperandCapability,
    OperationCapability,
    UnsupportedOperationPlan,
    declared_capabilities,
    register_operation_capabilities,
)
from conveyor.types.dtypes import (
    DType,
    any_dtype,
    bfloat16,
    complex64,
    complex128,
    complex_floating,
    dtype,
    float16,
    float32,
    float64,
    floating,
    int8,
    int16,
    int32,
    int64,
    integer,
    is_subtype_of,
    numeric,
    promote_types,
    signed_integer,
    uint8,
    uint16,
    uint32,
    uint64,
    unsigned_integer,
)
from conveyor.types.dtypes import bool_ as bool  # the dtype, named as in NumPy/PyTorch
from conveyor.types.layout import Layout, broadcast_shapes
from conveyor.types.options import OperationExecutionOptions
from conveyor.types.policy import (
    OperandPlan,
    OperationPlan,
    OperationSpec,
    registered_operations,
    resolve_plan,
)
from conveyor.types.warnings import ConveyorWarning

if _TYPE_CHECKING:
    from conveyor import array_api, plugins
    from conveyor.lib import random
    from conveyor.lib.composed import (  # composed from dispatch names; all/any shadow builtins
        QRResult,
        SlogdetResult,
        acos,
        acosh,
        all,
        allclose,
        any,
        argsort,
        asarray,
        asin,
        asinh,
        atan,
        atan2,
        atanh,
        bitwise_and,
        bitwise_invert,
        bitwise_left_shift,
        bitwise_or,
        bitwise_right_shift,
        bitwise_xor,
        broadcast_arrays,
        cholesky,
        clip,
        concatenate,
        conj,
        copysign,
        cosh,
        count_nonzero,
        cumulative_prod,
        cumulative_sum,
        det,
        diff,
        dot,
        einsum,
        empty_like,
        expand_dims,
        expm1,
        eye,
        flip,
        floor_divide,
        from_dlpack,
        from_numpy,
        full_like,
        hstack,
        hypot,
        imag,
        inv,
        isclose,
        isfinite,
        isinf,
        isnan,
        linspace,
        log1p,
        log10,
        log_softmax,
        logaddexp,
        logical_and,
        logical_or,
        logical_xor,
        logsumexp,
        matrix_transpose,
        max,
        mean,
        meshgrid,
        min,
        moveaxis,
        nextafter,
        nonzero,
        outer,
        pad,
        positive,
        qr,
        real,
        repeat,
        roll,
        searchsorted,
        signbit,
        sinh,
        slogdet,
        softmax,
        solve,
        split,
        square,
        stack,
        std,
        sum,
        take,
        take_along_axis,
        tan,
        tensordot,
        tile,
        transpose,
        tril,
        triu,
        trunc,
        unique,
        unique_all,
        unique_counts,
        unique_inverse,
        unique_values,
        unstack,
        var,
        vecdot,
        where,
    )
    from conveyor.lib.numpy_protocols import NumPyFallbackWarning
    from conveyor.lib.printing import (
        PrintOptions,
        get_printoptions,
        printoptions,
        set_printoptions,
    )
    from conveyor.lib.saving import load, save
    from conveyor.lib.tensor_methods import TensorMethods
    from conveyor.plugins import hookimpl

__version__ = "0.1.0"

_LAZY_SUBMODULES = frozenset({"array_api", "plugins"})

# The user library's public names load on first access (PEP 562), all modules at once: the
# composed functions, printing, saving and the NumPy protocols are about 22 M of the 145 M
# instructions `import conveyor` costs above its dependencies, and a program that calls only the
# engine's functions never needs them.
_LAZY_LIBRARY = (
    "conveyor.lib.composed",
    "conveyor.lib.numpy_protocols",
    "conveyor.lib.printing",
    "conveyor.lib.saving",
)


def __getattr__(name: str) -> object:
    """Load a lazily imported submodule or library name (PEP 562) on first access."""
    if name in _LAZY_SUBMODULES:
        return _importlib.import_module(f"conveyor.{name}")
    if name == "hookimpl":
        return _plugins_module().hookimpl
    if name == "random":
        module = globals()["random"] = _importlib.import_module("conveyor.lib.random")
        return module
    if name in __all__:
        return _load_library()[name]
    msg = f"module 'conveyor' has no attribute {name!r}"
    raise AttributeError(msg)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_LAZY_SUBMODULES, "hookimpl", "random"})


def _load_library() -> dict[str, object]:
    """Import the lazily loaded library modules and bind every public name they hold here."""
    names = globals()
    missing = set(__all__) - names.keys()
    for module_name in _LAZY_LIBRARY:
        module = _importlib.import_module(module_name)
        for name in missing & vars(module).keys():
            names[name] = getattr(module, name)
    return names


def _tensor_methods() -> TensorMethods:
    """The library's side of Tensor's composed operators, imported on their first use."""
    from conveyor.lib.tensor_methods import TensorMethods

    return TensorMethods(array_namespace=_array_namespace)


def _plugins_module() -> _ModuleType:
    """``conveyor.plugins``, imported on first need: a scan, a lookup by name, the CLI."""
    return _importlib.import_module("conveyor.plugins")


def _array_namespace(api_version: str | None = None) -> object:
    """The Array API namespace, imported on first use (it is the layer above the library)."""
    namespace: object = _importlib.import_module("conveyor.array_api").namespace(api_version)
    return namespace


def _default_host() -> plugins.PluginHost:
    """``conveyor.plugins.host()``, looked up on every call (a replaced host takes effect)."""
    host: plugins.PluginHost = _plugins_module().host()
    return host


def _scanned_host() -> plugins.PluginHost | None:
    """The default plugin host, only once it has scanned (else ``None``: no scan is started)."""
    module = _sys.modules.get("conveyor.plugins._host")
    default = None if module is None else module._default
    return default if default is not None and default._discovery is not None else None


# The plugin host and the user library sit above the engine, which reads them through these.
_plugin_access.connect(default=_default_host, scanned=_scanned_host)
_library.connect_on_first_use(_tensor_methods)
_einops_hook.install()  # einops finds Conveyor tensors (imports nothing itself)

__all__ = [
    "BoundCall",
    "CapabilitySet",
    "Carrier",
    "CarrierDefinition",
    "CarrierFacet",
    "CompositeProvider",
    "ConveyorWarning",
    "DType",
    "DependentCarrier",
    "KernelExecutionInterface",
    "KernelPack",
    "KernelPattern",
    "KernelProvider",
    "Layout",
    "MoveRoute",
    "NON_DIFFERENTIABLE",
    "NumPyFallbackWarning",
    "OperandCapability",
    "OperandPlan",
    "Operation",
    "OperationCapability",
    "OperationDefinition",
    "OperationExecutionOptions",
    "OperationPlan",
    "OperationRecord",
    "OperationSpec",
    "PreparedComposite",
    "PrintOptions",
    "Profiler",
    "ProviderCompletion",
    "ProviderContractError",
    "ProviderResult",
    "QRResult",
    "ResolvedInvocation",
    "ResultSpec",
    "SlogdetResult",
    "StorageProvider",
    "Subtensor",
    "Tensor",
    "TransferProvider",
    "TransferRoute",
    "Unsupported",
    "UnsupportedOperationPlan",
    "__version__",
    "abs",
    "acos",
    "acosh",
    "add",
    "add_observer",
    "adopt_storage",
    "all",
    "allclose",
    "any",
    "any_dtype",
    "arange",
    "argmax",
    "argmin",
    "argsort",
    "array_api",
    "as_strided",
    "asarray",
    "asin",
    "asinh",
    "atan",
    "atan2",
    "atanh",
    "bfloat16",
    "bitwise_and",
    "bitwise_invert",
    "bitwise_left_shift",
    "bitwise_or",
    "bitwise_right_shift",
    "bitwise_xor",
    "bool",
    "broadcast_arrays",
    "broadcast_shapes",
    "broadcast_to",
    "ceil",
    "cholesky",
    "clamp",
    "clip",
    "closed_carrier",
    "complex64",
    "complex128",
    "complex_floating",
    "concatenate",
    "conj",
    "conv_general",
    "copysign",
    "cos",
    "cosh",
    "count_nonzero",
    "cumsum",
    "cumulative_prod",
    "cumulative_sum",
    "declared_capabilities",
    "default_carrier",
    "define_operation",
    "definition_capabilities",
    "det",
    "diff",
    "div",
    "dot",
    "dtype",
    "eigh",
    "einsum",
    "elementwise_mul",
    "elu",
    "empty",
    "empty_like",
    "enable_grad",
    "eq",
    "erf",
    "execute_lowered",
    "exp",
    "exp2",
    "expand_dims",
    "expm1",
    "eye",
    "flip",
    "float16",
    "float32",
    "float64",
    "floating",
    "floor",
    "floor_divide",
    "from_dlpack",
    "from_numpy",
    "full",
    "full_like",
    "gather",
    "gelu",
    "get_default_carrier",
    "get_printoptions",
    "hookimpl",
    "hstack",
    "hypot",
    "imag",
    "int8",
    "int16",
    "int32",
    "int64",
    "integer",
    "inv",
    "is_closed_carrier",
    "is_grad_enabled",
    "is_subtype_of",
    "isclose",
    "isfinite",
    "isinf",
    "isnan",
    "le",
    "leaky_relu",
    "linspace",
    "load",
    "log",
    "log1p",
    "log2",
    "log10",
    "log_softmax",
    "logaddexp",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "logsumexp",
    "lt",
    "matmul",
    "matrix_transpose",
    "max",
    "maximum",
    "mean",
    "meshgrid",
    "min",
    "minimum",
    "move",
    "move_route",
    "move_routes",
    "moveaxis",
    "mul",
    "ne",
    "neg",
    "nextafter",
    "no_grad",
    "nonzero",
    "numeric",
    "ones",
    "ones_like",
    "operation_definition",
    "operation_definitions",
    "outer",
    "pad",
    "permute",
    "plugins",
    "positive",
    "pow",
    "printoptions",
    "profile",
    "progress",
    "promote_types",
    "qr",
    "random",
    "real",
    "rearrange",
    "recip",
    "reduce_max",
    "reduce_min",
    "reduce_prod",
    "reduce_sum",
    "register_carrier_definition",
    "register_kernel_pack",
    "register_move_route",
    "register_operation_capabilities",
    "registered_operations",
    "relu",
    "rem",
    "repeat",
    "reshape",
    "resolve_plan",
    "roll",
    "round",
    "rsqrt",
    "save",
    "scatter",
    "scatter_add",
    "searchsorted",
    "select",
    "set_default_carrier",
    "set_grad_enabled",
    "set_printoptions",
    "sigmoid",
    "sign",
    "signbit",
    "signed_integer",
    "silu",
    "sin",
    "sinh",
    "slogdet",
    "softmax",
    "softplus",
    "solve",
    "sort",
    "split",
    "sqrt",
    "square",
    "squeeze",
    "stack",
    "std",
    "storage_handle",
    "sub",
    "sum",
    "svd",
    "take",
    "take_along_axis",
    "tan",
    "tanh",
    "tensor",
    "tensordot",
    "tile",
    "topk",
    "transpose",
    "tril",
    "triu",
    "trunc",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "unique",
    "unique_all",
    "unique_counts",
    "unique_inverse",
    "unique_values",
    "unsigned_integer",
    "unsqueeze",
    "unstack",
    "var",
    "vecdot",
    "view",
    "where",
    "zeros",
    "zeros_like",
]
