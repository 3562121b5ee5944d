"""The carrier SDK: everything a carrier distribution imports from Conveyor, in one module.

A carrier (ours or a vendor's) imports Conveyor only as ``conveyor`` (the user API),
``conveyor.sdk`` (this module) and ``conveyor.plugins`` (``hookimpl`` and the plugin states);
``make lint`` holds every shipped carrier to it. Two ways to write one
(``docs/plugin-authors.md``):

- **definition-free**: subclass ``Carrier``, implement the storage hooks, and dispatch through
  a declarative table of ``Operation`` classes (``_dispatch_classes``), with views from
  ``view_operations`` and gradients from ``VJPOperation`` / ``vjp``;
- **definition-backed**: register a ``CarrierDefinition`` of providers (storage, kernels,
  transfers, a composite, facets); the framework owns binding, the capability gate, result
  checks and autograd.

What a carrier may touch beyond the names below: it overrides the underscore hooks ``Carrier``
and ``Operation`` document (``_allocate``, ``_storage_size``, ``_storage_dtype``,
``_storage_mutable``, ``_read``, ``_write``, ``_export``, ``_import``, ``_release``,
``_dispatch_op``, ``_dispatch_classes``, ``_forward``, ``_release_saved``,
``_compute_operation_capabilities``, ``_capability_key``, ``_dlpack``, ``_dlpack_device``,
and ``_version`` as a property when its data can change through another carrier), calls
``_mark_written`` and the ``_check_*`` guards, and reads, never writes, the fast fields
``Tensor._carrier`` / ``_layout`` / ``_dtype`` and the dispatch metadata ``_operation_name``,
``_dispatch_carrier_class`` and ``_dispatch_carrier`` of an operation.
"""

from __future__ import annotations

from conveyor.engine.carrier import (
    Carrier,
    DependentCarrier,
    as_dispatched,
    closed_carrier,
    is_closed_carrier,
    storage_only_refusal,
)
from conveyor.engine.carrier_registry import (
    CarrierDefinition,
    adopt_storage,
    carrier_definition,
    definition_capabilities,
    register_carrier_definition,
    register_kernel_pack,
    storage_handle,
)
from conveyor.engine.definition_dispatch import DefinitionOperation
from conveyor.engine.gradients import VJPOperation, differentiable_operations, vjp
from conveyor.engine.move import MoveRoute, move_route, register_move_route, span_copy
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
from conveyor.engine.progress import active as progress_active
from conveyor.engine.progress import report as report_progress
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
from conveyor.engine.tensor import Tensor, publish
from conveyor.engine.views import (
    VIEW_VJPS,
    CopyFunction,
    contiguous_copy,
    view_operations,
    view_result,
)
from conveyor.types.capabilities import (
    CapabilitySet,
    OperandCapability,
    OperationCapability,
    UnsupportedOperationPlan,
    declared_capabilities,
    policy_capabilities,
    register_operation_capabilities,
)
from conveyor.types.dtypes import CONCRETE_DTYPES, DType, from_numpy
from conveyor.types.layout import (
    Layout,
    broadcast_shapes,
    normalize_axes,
    normalize_axis,
    rearrange_plan,
    slot_indices,
    view_layout,
)
from conveyor.types.options import OperationExecutionOptions, options_schema
from conveyor.types.policy import (
    VIEW_OPERATIONS,
    OperandPlan,
    OperationPlan,
    OperationSpec,
    enumerate_plans,
    is_planned,
    operation_spec,
    registered_operations,
    resolve_plan,
)

#: ``wrap(carrier, layout, dtype)``: a tensor over an existing carrier, the layout trusted to lie
#: within its slots (nothing is checked; ``Tensor(carrier, layout)`` checks).
wrap = Tensor._wrap

__all__ = [
    "BoundCall",
    "CONCRETE_DTYPES",
    "CapabilitySet",
    "Carrier",
    "CarrierDefinition",
    "CarrierFacet",
    "CompositeProvider",
    "CopyFunction",
    "DType",
    "DefinitionOperation",
    "DependentCarrier",
    "KernelExecutionInterface",
    "KernelPack",
    "KernelPattern",
    "KernelProvider",
    "Layout",
    "MoveRoute",
    "NON_DIFFERENTIABLE",
    "OperandCapability",
    "OperandPlan",
    "Operation",
    "OperationCapability",
    "OperationDefinition",
    "OperationExecutionOptions",
    "OperationPlan",
    "OperationSpec",
    "PreparedComposite",
    "ProviderCompletion",
    "ProviderContractError",
    "ProviderResult",
    "ResolvedInvocation",
    "ResultSpec",
    "StorageProvider",
    "Tensor",
    "TransferProvider",
    "TransferRoute",
    "Unsupported",
    "UnsupportedOperationPlan",
    "VIEW_OPERATIONS",
    "VIEW_VJPS",
    "VJPOperation",
    "adopt_storage",
    "as_dispatched",
    "broadcast_shapes",
    "carrier_definition",
    "closed_carrier",
    "contiguous_copy",
    "declared_capabilities",
    "define_operation",
    "definition_capabilities",
    "differentiable_operations",
    "enumerate_plans",
    "execute_lowered",
    "from_numpy",
    "is_closed_carrier",
    "is_planned",
    "move_route",
    "normalize_axes",
    "normalize_axis",
    "operation_definition",
    "operation_definitions",
    "operation_spec",
    "options_schema",
    "policy_capabilities",
    "progress_active",
    "publish",
    "rearrange_plan",
    "register_carrier_definition",
    "register_kernel_pack",
    "register_move_route",
    "register_operation_capabilities",
    "registered_operations",
    "report_progress",
    "resolve_plan",
    "slot_indices",
    "span_copy",
    "storage_handle",
    "storage_only_refusal",
    "view_layout",
    "view_operations",
    "view_result",
    "vjp",
    "wrap",
]
