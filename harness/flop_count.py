"""A trained network's FLOPs per training example, counted by the framework on the network itself.

Runs in the sandboxed predictor (harness.worker's `flops` request), after the run's stored model is
loaded: one training step's forward and backward on two eval inputs as the network takes them
(`export_inputs`), counted, halved. The count is informative only (`dawnbench analyze roofline`):
it runs in the reference's process, so no ranked figure, bound or tolerance is ever read from it.

Convention (the one `make bench-gpu` uses for ResNet-50, bench/gpu.py): 2 FLOPs per multiply-add,
over convolutions and matrix products (forward, and backward for inputs and weights); elementwise
work (batch norm, activations, the optimizer) is not counted. Two examples, not one: batch norm in
training mode needs two.

    PyTorch     torch.utils.flop_counter.FlopCounterMode
    TensorFlow  its profiler's float_ops over the step's graph, the convolution and matmul ops
    MXNet       not counted: no counter of its own, and a guess is not a count
"""
from __future__ import annotations

import importlib

import numpy as np

EXAMPLES = 2
CONVENTION = "2 FLOPs per multiply-add; convolutions and matmuls, forward and backward (bench/gpu.py's)"


class NotCounted(Exception):
    """Why this network's FLOPs were not counted (one line)."""


def count(framework: str, ref) -> dict:
    """{"flops_per_example", "counter", "examples", "by_op", "convention"} for the loaded reference."""
    x = np.asarray(ref.export_inputs(0, EXAMPLES))
    if x.ndim < 1 or len(x) < 1:
        raise NotCounted("export_inputs(0, 2) gave no example")
    if framework == "pytorch":
        total, by_op, counter, sizes = _torch(ref.evaluated(), x)
    elif framework == "tensorflow":
        total, by_op, counter, sizes = _tensorflow(ref.evaluated(), x)
    else:
        raise NotCounted(f"{framework}: no FLOP counter of the framework's own (a guess is not a count)")
    return {"flops_per_example": total / len(x), "counter": counter, "examples": int(len(x)),
            "input_shape": list(x.shape[1:]), "by_op": {k: v / len(x) for k, v in sorted(by_op.items())},
            "convention": CONVENTION, "parameter_bytes": sizes[0],
            "activation_bytes_per_example": sizes[1] / len(x) if sizes[1] is not None else None}


def _torch(net, x: np.ndarray) -> tuple[float, dict, str, tuple]:
    # imported by name, as harness.worker does: the harness depends on no framework; the reference's
    # process, where this runs, has its own
    torch = importlib.import_module("torch")
    FlopCounterMode = importlib.import_module("torch.utils.flop_counter").FlopCounterMode
    param = next(net.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    batch = torch.from_numpy(np.ascontiguousarray(x)).to(device)
    if batch.is_floating_point() and param is not None and param.is_floating_point():
        batch = batch.to(param.dtype)
    activations = [0]

    def outputs(module, inputs, out):      # what each layer writes, kept for its backward
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(t, torch.Tensor):
                activations[0] += t.numel() * t.element_size()
    leaves = [m for m in net.modules() if not list(m.children())]
    hooks = [m.register_forward_hook(outputs) for m in leaves]
    was_training = net.training
    net.train()
    try:
        with torch.enable_grad(), FlopCounterMode(display=False) as counter:
            out = net(batch)
            out = out[0] if isinstance(out, (tuple, list)) else out
            out.float().sum().backward()
    finally:
        for hook in hooks:
            hook.remove()
        net.train(was_training)
        net.zero_grad(set_to_none=True)
    by_op = {str(op): float(n) for op, n in counter.get_flop_counts().get("Global", {}).items()}
    parameter_bytes = sum(p.numel() * p.element_size() for p in net.parameters())
    return (float(counter.get_total_flops()), by_op, f"torch.utils.flop_counter.FlopCounterMode (torch {torch.__version__})",
            (int(parameter_bytes), float(activations[0])))


# TensorFlow ops of the convention: convolutions and matrix products, with their gradients
TF_OPS = ("Conv2D", "Conv3D", "DepthwiseConv2dNative", "MatMul", "BatchMatMul", "Einsum")


def _tensorflow(model, x: np.ndarray) -> tuple[float, dict, str, tuple]:
    tf = importlib.import_module("tensorflow")
    convert_variables_to_constants_v2 = importlib.import_module(
        "tensorflow.python.framework.convert_to_constants").convert_variables_to_constants_v2

    @tf.function
    def step(batch):
        with tf.GradientTape() as tape:
            out = model(batch, training=True)
            out = out[0] if isinstance(out, (tuple, list)) else out
            loss = tf.reduce_sum(tf.cast(out, tf.float32))
        return loss, tape.gradient(loss, model.trainable_variables)     # the loss too: the forward is kept

    concrete = step.get_concrete_function(tf.constant(x))
    try:
        function = convert_variables_to_constants_v2(concrete)
    except (ValueError, TypeError):     # a training step that assigns variables (batch norm's averages)
        function = concrete             # cannot be frozen; its own graph has the shapes the count needs
    graph = function.graph
    options = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
    options["output"] = "none"
    profile = tf.compat.v1.profiler.profile(graph=graph, run_meta=tf.compat.v1.RunMetadata(), cmd="scope",
                                            options=options)
    # Only the ops the step's results need: a gradient function makes both of a convolution's
    # gradients, and the unfrozen graph keeps the input's (the images') that nothing uses
    needed = _ancestors([t.op for t in function.outputs] + list(graph.control_outputs))
    by_op, nodes = {}, list(profile.children)
    while nodes:
        node = nodes.pop()
        nodes.extend(node.children)
        op = needed.get(node.name)
        if node.float_ops and op is not None and op.type.startswith(TF_OPS):
            by_op[op.type] = by_op.get(op.type, 0.0) + float(node.float_ops)
    everything = float(profile.total_float_ops)
    by_op["(all float ops the profiler counts, for reference)"] = everything
    parameter_bytes = sum(int(np.prod(v.shape)) * tf.as_dtype(v.dtype).size for v in model.weights)
    try:          # each layer's output, as a functional model declares it (None where it does not)
        activations = float(sum(int(np.prod([len(x), *layer.output.shape[1:]])) * tf.as_dtype(layer.output.dtype).size
                                for layer in model.layers))
    except (AttributeError, TypeError, ValueError):
        activations = None
    return (sum(v for k, v in by_op.items() if not k.startswith("(")), by_op,
            f"tf.compat.v1.profiler float_ops (TensorFlow {tf.__version__})", (int(parameter_bytes), activations))


def _ancestors(ops: list) -> dict:
    """Every op the given ones depend on (data and control inputs), by name."""
    seen, stack = {}, list(ops)
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen[op.name] = op
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return seen
