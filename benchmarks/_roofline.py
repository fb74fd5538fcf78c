"""What a training step would run on a GPU, counted on the CPU (for ``gpu_roofline.py``).

Two instruments, each with its limits written next to it:

- :class:`InductorRecorder`: every graph that ``torch.compile`` hands to inductor is lowered and
  scheduled (fused) as inductor does it, with the fusion rules of its CUDA backend (Triton's
  scheduling, swapped in for the CPU device), then recorded instead of code-generated: its
  kernels (scheduler nodes that generate code), extern calls (matmuls and other library
  kernels), the bytes each reads and writes (inductor's own estimate: every buffer a kernel
  touches counted once, "worst-case inputs, best-case optimization", except that a direct
  read of part of a buffer counts that part, :func:`accessed_bytes`) and the FLOPs of its
  extern calls. Calling such a graph returns uninitialized outputs of the right shapes: nothing
  is computed, so a packed step of eight full-size replicas costs seconds. Extern calls count
  their tensors whole, except the row attention's bias, which its kernels read and whose
  gradient they write at the pairs of one graph only (:class:`PairShare`).
- ``_cuda_policy.py``: what differs on a CUDA device, made to happen on the CPU (autocast's
  policy, the fused attention kernel).
- :func:`eager_costs`: what runs outside compiled graphs (the optimizer, clipping, the loss when
  it is not compiled), from ``torch.profiler``: each innermost aten call that launches a kernel
  on a GPU counts one launch (a multi-tensor ``_foreach_``/``_fused_`` call one per chunk of
  tensors, as CUDA's ``multi_tensor_apply`` launches), its tensor inputs' bytes read and as
  many written; and the host synchronizations (``item``, ``nonzero`` and the like).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

#: H100 SXM figures the bounds use: HBM bandwidth, a kernel launch without and with CUDA
#: graphs, dense bf16 tensor-core FLOP/s, and the L2 bytes the reuse estimate lets a buffer stay
#: in (40 of its 50 MB: two partitions, other traffic).
H100 = {"bytes_per_s": 3.0e12, "launch_s": 4e-6, "graphed_launch_s": 1.5e-6,
        "flops_per_s": 800e12, "l2_bytes": 40e6}
_GRAPH = "roofline::graph"
#: aten calls that launch no kernel on a GPU (views, allocations, metadata).
NO_KERNEL = {
    "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::view", "aten::_unsafe_view",
    "aten::reshape", "aten::_reshape_alias", "aten::expand", "aten::expand_as",
    "aten::as_strided", "aten::as_strided_", "aten::slice", "aten::select", "aten::unsqueeze",
    "aten::squeeze", "aten::permute", "aten::t", "aten::transpose", "aten::detach",
    "aten::detach_", "aten::alias", "aten::lift_fresh", "aten::resolve_conj",
    "aten::resolve_neg", "aten::split", "aten::split_with_sizes", "aten::unbind", "aten::chunk",
    "aten::narrow", "aten::flatten", "aten::unflatten", "aten::view_as", "aten::set_",
    "aten::result_type", "aten::to", "aten::_to_copy", "aten::contiguous", "aten::type_as",
    "aten::numpy_T", "aten::size", "aten::stride", "aten::dim", "aten::is_nonzero",
    "aten::_has_compatible_shallow_copy_type", "aten::_local_scalar_dense", "aten::item",
}
#: aten calls that make the host wait for the device.
SYNCS = {"aten::_local_scalar_dense", "aten::nonzero", "aten::masked_select",
         "aten::_unique2", "aten::unique_consecutive", "aten::unique_dim", "aten::equal",
         "aten::is_nonzero", "aten::repeat_interleave", "aten::allclose"}
#: CUDA's multi_tensor_apply: tensors per launch for 1..5 tensor lists.
_TENSORS_PER_LAUNCH = {1: 110, 2: 64, 3: 48, 4: 36, 5: 30}


@dataclass
class GraphRecord:
    """One compiled graph as inductor scheduled it (per call)."""

    name: str
    kernels: int
    externs: int
    bytes: int
    flops: int
    #: ``bytes`` less the reads that would hit L2 (see :func:`hbm_bytes`)
    hbm_bytes: int = 0
    calls: int = 0
    #: the scheduled nodes' ``(bytes, what they compute)``, largest first (at most 40)
    largest: list[tuple[int, str]] = field(default_factory=list)
    #: each launching node's own bound, bytes or FLOPs (seconds, every byte from HBM)
    node_s: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class PairShare:
    """The share of a ``[S, L, L, H]`` bias's bytes the row attention kernels move.

    They read the bias, and write its gradient, at pairs of one graph only: for each query a
    run of its graph's keys (heads last), whole 32-byte sectors. ``read``: the sectors those
    runs touch, of all; ``write``: the same plus one more for each sector a run covers only in
    part (ECC'd HBM writes whole sectors: a read first). Where a step's batch has attention
    sequences ``gpu_roofline.py`` sets :data:`PAIR_SHARE` from it (:meth:`of`).
    """

    read: float = 1.0
    write: float = 1.0

    @classmethod
    def of(cls, sequence_graph: Any, heads: int, item_size: int, sector: int = 32) -> PairShare:
        """The shares for ``sequence_graph`` ``[..., S, L]`` (``-1``: padding)."""
        import numpy as np

        graph = np.asarray(sequence_graph).reshape(-1, sequence_graph.shape[-1])
        count, length = graph.shape
        same = (graph[:, :, None] == graph[:, None, :]) & (graph[:, :, None] >= 0)
        first = same.argmax(2)
        end = length - same[:, :, ::-1].argmax(2)
        key = heads * item_size  # one key's bytes, heads last
        row = (np.arange(count * length) * length * key).reshape(count, length)
        start, stop = row + first * key, row + end * key
        real = same.any(2)
        touched = np.where(real, -(-stop // sector) - start // sector, 0)
        partial = np.where(real, (start % sector > 0).astype(int) + (stop % sector > 0), 0)
        total = count * length * length * key / sector
        return cls(float(touched.sum() / total), float((touched + partial).sum() / total))


#: The row attention's shares in the step being recorded (1: the whole bias, as before).
PAIR_SHARE = PairShare()


class InductorRecorder:
    """Records the graphs inductor compiles instead of generating their code.

    Args:
        cuda_fusion: fuse with inductor's CUDA (Triton) scheduling rules; false: its CPU
            (C++) rules. Lowering itself stays the CPU's (see the module docstring).
    """

    def __init__(self, cuda_fusion: bool = True) -> None:
        self.cuda_fusion = cuda_fusion
        self.graphs: list[GraphRecord] = []
        self._stack = ExitStack()

    def __enter__(self) -> InductorRecorder:
        import torch._inductor.config as inductor_config
        import torch._inductor.scheduler as scheduler
        from torch._inductor.graph import GraphLowering

        stack, recorder = self._stack, self
        stack.enter_context(inductor_config.patch(fx_graph_cache=False, autotune_local_cache=False,
                                                  compile_threads=1))
        stack.enter_context(torch._functorch.config.patch(enable_autograd_cache=False))
        original_compile = GraphLowering.compile_to_module

        def record(lowering: GraphLowering) -> _Outputs:
            lowering._update_scheduler()
            recorder.graphs.append(_record(lowering, len(recorder.graphs)))
            return _Outputs(lowering.module, recorder.graphs[-1])

        GraphLowering.compile_to_module = record
        stack.callback(setattr, GraphLowering, "compile_to_module", original_compile)
        if self.cuda_fusion:
            from torch._inductor.codegen.triton import TritonScheduling

            original = scheduler.get_scheduling_for_device
            scheduler.get_scheduling_for_device = (
                lambda device: TritonScheduling if device == "cpu" else original(device))
            stack.callback(setattr, scheduler, "get_scheduling_for_device", original)
            _group_cpu_combo_kernels(stack)
        torch._dynamo.reset()
        stack.callback(torch._dynamo.reset)
        return self

    def __exit__(self, *exc: object) -> None:
        global PAIR_SHARE
        PAIR_SHARE = PairShare()
        self._stack.close()


def _group_cpu_combo_kernels(stack: ExitStack) -> None:
    """Combo kernels (where a compile asks for them) group CPU kernels too, as CUDA's.

    Inductor's own grouping leaves CPU nodes out (its C++ kernels have no combo form); here
    they are grouped as it groups CUDA ones: each set of independent nodes, in order, at most
    ``combo_kernel_max_num_nodes`` to a kernel. Nothing is generated from them (see
    :class:`InductorRecorder`), so the grouping only has to be counted.
    """
    import torch._inductor.config as inductor_config
    from torch._inductor.scheduler import ForeachKernelSchedulerNode

    def groups(scheduler: Any) -> list[list[Any]]:
        most = inductor_config.combo_kernel_max_num_nodes
        return [independent[i:i + most] for nodes in scheduler._topological_sort_nodes()
                for independent in [[n for n in nodes if n.get_device() is not None]]
                for i in range(0, len(independent), most)]

    original = ForeachKernelSchedulerNode.group_algorithm_for_combo_kernels
    ForeachKernelSchedulerNode.set_group_algorithm_for_combo_kernels(groups)
    stack.callback(ForeachKernelSchedulerNode.set_group_algorithm_for_combo_kernels, original)


def _record(lowering: Any, index: int) -> GraphRecord:
    from torch._inductor.scheduler import ExternKernelSchedulerNode, NopKernelSchedulerNode

    kernels = externs = size = flops = 0
    largest, node_s = [], []
    nodes = [n for n in lowering.scheduler.nodes if not isinstance(n, NopKernelSchedulerNode)]
    for node in nodes:
        node_bytes, node_flops = sum(accessed_bytes(node, True, True).values()), 0
        size += node_bytes
        largest.append((node_bytes, _describe(node)))
        if isinstance(node, ExternKernelSchedulerNode):
            externs += not _is_view_like(node)
            node_flops = node.estimate_flops() or 0
            flops += node_flops
        else:
            kernels += 1
        if not isinstance(node, ExternKernelSchedulerNode) or not _is_view_like(node):
            node_s.append(max(node_bytes / H100["bytes_per_s"], node_flops / H100["flops_per_s"]))
    kind = "backward" if "tangents_1" in {n.name for n in lowering.module.graph.nodes} else \
        "forward"
    largest.sort(key=lambda item: -item[0])
    return GraphRecord(f"{index}:{kind}", kernels, externs, size, flops,
                       hbm_bytes(nodes, int(H100["l2_bytes"])), largest=largest[:40],
                       node_s=node_s)


def accessed_bytes(node: Any, include_reads: bool, include_writes: bool) -> dict[str, int]:
    """The bytes ``node`` reads and (or) writes per buffer: inductor's, less untouched parts.

    Inductor counts each buffer a kernel touches at the kernel's size, capped at the buffer's
    (``get_read_write_buffer_accesses``), and an extern call's inputs whole: a matmul reading
    its ``[D, 3D]`` weight from the flat parameters, or a kernel adding a ``[3D]`` slice of them
    to ``[T, 3D]`` rows, is charged the whole flat buffer (1.9 MB at K=2, read this way about
    110 times in ZINC-subset's step). Here a buffer only ever read through views (an extern's)
    or direct indices (a kernel's, no gather) is capped at the elements those reach: the views'
    sizes, the index variables' ranges (``MemoryDep.get_numel``). Gathers keep inductor's.
    A kernel's own intermediates (a buffer it writes and only it reads, not a graph output)
    are not written: inductor's code generation drops them (``remove_kernel_local_buffers``,
    by the scheduler's ``can_buffer_be_removed_through_fusion``), which the recorder does not
    run; inductor's estimate drops them from a fused kernel, not from a combo kernel.
    """
    accesses = node.get_read_write_buffer_accesses(include_reads=include_reads,
                                                   include_writes=include_writes)
    for name in _kernel_local(node) if include_writes else ():
        accesses.pop(name, None)
    reached = {}
    for name in accesses:
        elements = _reached_elements(node, name, include_reads, include_writes)
        if elements:
            reached[name] = elements * _dtype_size(name)
    sizes = {name: min(size, reached.get(name, size)) for name, size in accesses.items()}
    return _row_attention_pairs(node, sizes, include_reads, include_writes)


def _row_attention_pairs(node: Any, sizes: dict[str, int], include_reads: bool,
                         include_writes: bool) -> dict[str, int]:
    """``sizes`` with the row attention op's bias moved at :data:`PAIR_SHARE`.

    Its bias read, and its gradient written, at those shares of their bytes (an op without
    ``sequence_graph``, from before that, moves them whole).
    """
    import torch

    op = getattr(getattr(node, "node", None), "op_overload", None)
    if op is None or op.namespace != "graphormer_sepnorm" or "row_attention" not in str(op):
        return sizes
    names = [a.name for a in op._schema.arguments if isinstance(a.type, torch._C.TensorType)]
    if "sequence_graph" not in names:
        return sizes
    bias = node.node.inputs[names.index("bias")]
    whole = _elements(bias) * bias.get_dtype().itemsize
    if include_reads and bias.get_name() in sizes:
        sizes[bias.get_name()] = min(sizes[bias.get_name()], round(whole * PAIR_SHARE.read))
    if include_writes and "grad" in names:  # the backward: one buffer of its three outputs
        (out,) = (d.name for d in node.read_writes.writes)
        sizes[out] -= round(whole * (1 - PAIR_SHARE.write))
    return sizes


def _kernel_local(node: Any) -> list[str]:
    """The buffers a fused kernel writes that only it reads (see :func:`accessed_bytes`)."""
    from torch._inductor.scheduler import ExternKernelSchedulerNode
    from torch._inductor.utils import OrderedSet
    from torch._inductor.virtualized import V

    if isinstance(node, ExternKernelSchedulerNode) or not hasattr(node, "get_outputs"):
        return []
    fused = OrderedSet(n.get_name() for n in node.get_nodes())
    return [buffer.get_name() for buffer in node.get_outputs()
            if V.graph.scheduler.can_buffer_be_removed_through_fusion(buffer.get_name(), fused)]


def _reached_elements(node: Any, name: str, include_reads: bool,
                      include_writes: bool) -> int | None:
    """Elements of buffer ``name`` that ``node``'s accesses can reach; ``None``: unknown."""
    from torch._inductor import ir
    from torch._inductor.dependencies import MemoryDep
    from torch._inductor.scheduler import ExternKernelSchedulerNode
    from torch._inductor.virtualized import V

    if isinstance(node, ExternKernelSchedulerNode):
        inputs = [i for i in getattr(node.node, "inputs", [])
                  if isinstance(i, ir.IRNode) and i.get_name() == name]
        writes = include_writes and name in {d.name for d in node.read_writes.writes}
        if not include_reads or writes or not inputs \
                or not all(isinstance(i, ir.ReinterpretView) for i in inputs):
            return None
        return sum(V.graph.sizevars.optimization_hint(ir.sympy_product(i.get_size()),
                                                      fallback=0) for i in inputs) or None
    deps = getattr(node, "read_writes", None)
    if deps is None:
        return None
    mine = [d for d in [*(deps.reads if include_reads else ()),
                        *(deps.writes if include_writes else ())] if d.name == name]
    if not mine or not all(isinstance(d, MemoryDep) and not d.is_indirect() for d in mine):
        return None
    return V.graph.sizevars.optimization_hint(sum(d.get_numel() for d in mine), fallback=0) \
        or None


def _elements(buffer: Any) -> int:
    from torch._inductor import ir
    from torch._inductor.virtualized import V

    return V.graph.sizevars.optimization_hint(ir.sympy_product(buffer.get_size()), fallback=0)


def _dtype_size(name: str) -> int:
    from torch._inductor.utils import get_dtype_size
    from torch._inductor.virtualized import V

    return get_dtype_size(V.graph.get_dtype(name))


def hbm_bytes(nodes: list[Any], capacity: int) -> int:
    """The bytes ``nodes`` (in order) move to and from HBM if recent buffers stay in L2.

    A read of a buffer that one of the last kernels touched, within ``capacity`` bytes of
    buffers touched since (least recently used first out), is an L2 hit; every other read and
    every write goes to HBM. Per compiled graph: its inputs (a backward's saved activations
    too) start out of cache. Optimistic where L2 evicts earlier than this, pessimistic where
    writes of short-lived buffers never leave L2.
    """
    recent: OrderedDict[str, int] = OrderedDict()
    total = 0
    for node in nodes:
        reads, writes = accessed_bytes(node, True, False), accessed_bytes(node, False, True)
        total += sum(size for name, size in reads.items() if name not in recent)
        total += sum(writes.values())
        for name, size in [*reads.items(), *writes.items()]:
            recent.pop(name, None)
            recent[name] = size
        held = sum(recent.values())
        while held > capacity:
            held -= recent.popitem(last=False)[1]
    return total


def _describe(node: Any) -> str:
    """The aten operations a scheduled (possibly fused) node computes, short."""
    parts = node.get_nodes() if hasattr(node, "get_nodes") else [node]
    targets = []
    for part in parts:
        for origin in getattr(getattr(part, "node", None), "origins", ()) or ():
            target = str(getattr(origin, "target", origin)).replace("aten.", "")
            target = target.removesuffix(".default")
            if target not in targets:
                targets.append(target)
    return "+".join(targets[:6]) + ("+..." if len(targets) > 6 else "")


def _is_view_like(node: Any) -> bool:
    """MultiOutput nodes (a tuple's items) and reinterpretations launch nothing."""
    from torch._inductor import ir

    return isinstance(node.node, ir.MultiOutput | ir.ReinterpretView)


class _Outputs:
    """The compiled module's stand-in: ``call`` returns empty outputs shaped as the graph's."""

    __file__ = "roofline"

    def __init__(self, gm: torch.fx.GraphModule, record: GraphRecord) -> None:
        output = gm.graph.output_node().args[0]
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.specs = [n if not isinstance(n, torch.fx.Node) else placeholders.index(n)
                      if n in placeholders else n.meta.get("val")
                      for n in (output if isinstance(output, list | tuple) else [output])]
        self.record = record

    def call(self, args: list[Any]) -> list[Any]:
        """Uninitialized tensors of the outputs' shapes, strides and dtypes."""
        self.record.calls += 1
        with record_function(_GRAPH):
            out = [args[s] if isinstance(s, int) else _empty_like(s) for s in self.specs]
        args.clear()
        return out


def _empty_like(value: Any) -> Any:
    if not isinstance(value, torch.Tensor):
        return value if not isinstance(value, torch.SymInt) else int(value)
    return torch.empty_strided(tuple(int(s) for s in value.shape),
                               tuple(int(s) for s in value.stride()), dtype=value.dtype)


@dataclass
class EagerCosts:
    """What ran outside compiled graphs in one step."""

    launches: int
    bytes: int
    flops: int
    syncs: int


def eager_costs(step: Callable[[], Any]) -> EagerCosts:
    """Runs ``step`` under the profiler and counts (see the module docstring)."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True) as prof:
        step()
    events = list(prof.events())
    launches = size = flops = syncs = 0
    for event in events:
        if not event.name.startswith("aten::") or _inside_graph(event):
            continue
        syncs += event.name in SYNCS and not _under(event, "aten::_fused_adam")
        if event.name in NO_KERNEL or _scalar_copy(event) or any(
                c.name.startswith("aten::") for c in event.cpu_children):
            continue
        count, read = _launches_and_bytes(event)
        launches, size, flops = launches + count, size + 2 * read, flops + (event.flops or 0)
    return EagerCosts(launches, size, flops, syncs)


def _inside_graph(event: Any) -> bool:
    return _under(event, _GRAPH)


def _under(event: Any, prefix: str) -> bool:
    """Whether a caller of ``event`` is named ``prefix...``.

    The CPU's fused AdamW reads each step counter to the host; CUDA's reads them on the device,
    so syncs under it are not counted.
    """
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(prefix):
            return True
        parent = parent.cpu_parent
    return False


def _scalar_copy(event: Any) -> bool:
    """The CPU's wrapping of Python scalars into 0-dim tensors (a kernel argument on a GPU)."""
    return event.name == "aten::copy_" and all(s == [] for s in event.input_shapes)


def _launches_and_bytes(event: Any) -> tuple[int, int]:
    sizes = {"double": 8, "long int": 8, "float": 4, "int": 4, "c10::BFloat16": 2,
             "c10::Half": 2, "short int": 2, "bool": 1, "unsigned char": 1, "signed char": 1}
    lists = [s for s in event.input_shapes if s and isinstance(s[0], list)]
    read = 0
    # torch 2.11's profiler events (the GPU image's) record no dtypes: 4 bytes an element
    dtypes = getattr(event, "input_dtypes", None) or ["float"] * len(event.input_shapes)
    for shape, dtype in zip(event.input_shapes, dtypes, strict=False):
        shapes = shape if shape and isinstance(shape[0], list) else [shape]
        read += sum(math.prod(s) * sizes.get(dtype, 4) for s in shapes if isinstance(s, list))
    if not lists:
        return 1, read
    tensors = len(lists[0])
    return math.ceil(tensors / _TENSORS_PER_LAUNCH.get(len(lists), 30)), read
