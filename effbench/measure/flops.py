"""FLOPs per training image, counted by PyTorch on one real step (no hand-written tables).

`torch.utils.flop_counter.FlopCounterMode` counts the FLOPs of the ops that dominate a CNN
(convolutions, matmuls, attention; 2 FLOPs per multiply-add) as they run, forward and backward,
which is the usual numerator for model FLOPs utilisation (MFU). Element-wise ops (BN, activations,
the optimizer) are not counted.

One correction: torch 2.14.1's `conv_backward_flop` (torch/utils/flop_counter.py) counts the
weight gradient as `conv_flop_count(t(x_shape), t(grad_out_shape), ...)`, i.e. every input channel
against every output channel, as if groups were 1: a depthwise conv's backward reads groups+1 times
its forward instead of 2 (EfficientNet's training FLOPs ~14x too high). `STEP_FLOP_MAPPING` replaces
that formula with `conv_backward_flops` below, passed to FlopCounterMode's `custom_mapping`.

Pass the bare module, not a DDP wrapper: a DDP backward would also run an all-reduce.
"""

from __future__ import annotations

from math import prod
from typing import Any, NamedTuple


class StepFlops(NamedTuple):
    """FLOPs of one training step per image: the whole step, its forward alone, and the step's FLOPs in
    matmul-kind ops (`MATMUL_OPS`: cuBLAS's, under torch.backends.cuda.matmul.allow_tf32), the rest being
    convolutions (cuDNN's, under torch.backends.cudnn.allow_tf32): MFU holds each against its own peak."""

    per_image: float
    forward_per_image: float
    matmul_per_image: float = 0.0


# The ops of torch's flop_registry (torch/utils/flop_counter.py:822-843) that are not convolutions: matrix
# products (cuBLAS, under the matmul switch) and attention (matrix products too, never under cuDNN's conv
# switch; its fp32 kernels have no datasheet rate of their own, so the matmul column is the nearer peak).
# Every other counted op is a convolution (aten.convolution, _convolution, cudnn_convolution,
# convolution_overrideable, _slow_conv2d_forward, convolution_backward).
def is_matmul_op(op: Any) -> bool:
    """True for FlopCounterMode's matmul / attention ops, by the op's name ("aten.addmm", "aten.mm")."""
    return "conv" not in str(op).lower()


def matmul_flops(counts: dict[str, dict[Any, int]]) -> float:
    """The matmul-kind FLOPs in FlopCounterMode.get_flop_counts()'s "Global" table (its every op's total)."""
    return float(sum(n for op, n in (counts.get("Global") or {}).items() if is_matmul_op(op)))


def conv_forward_flops(x_shape: Any, w_shape: Any, out_shape: Any, *, transposed: bool) -> int:
    """2 x multiply-adds of a (grouped, strided, transposed) convolution, bias ignored.

    The weight is (Cout, Cin/groups, *k) for a convolution, (Cin, Cout/groups, *k) transposed, so
    every element of the larger side (output, or the transposed conv's input) takes w[1:] products.
    """
    per_point = prod(int(d) for d in w_shape[1:])
    points = prod(int(d) for d in (x_shape if transposed else out_shape))
    return 2 * points * per_point


def conv_backward_flops(
    grad_out_shape: Any,
    x_shape: Any,
    w_shape: Any,
    _bias: Any,
    _stride: Any,
    _padding: Any,
    _dilation: Any,
    transposed: bool,
    _output_padding: Any,
    _groups: int,
    output_mask: Any,
    out_shape: Any = None,
    **_: Any,
) -> int:
    """aten.convolution_backward: grad-input and grad-weight each cost one forward, where asked for.

    Signature of torch's own `conv_backward_flop` (the schema of aten.convolution_backward:
    grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding,
    groups, output_mask); FlopCounterMode's shape_wrapper passes shapes. grad_output has the
    forward's output shape, so one forward costs `conv_forward_flops(x, w, grad_out)`.
    """
    forward = conv_forward_flops(x_shape, w_shape, grad_out_shape, transposed=transposed)
    return forward * (int(bool(output_mask[0])) + int(bool(output_mask[1])))


def step_flop_mapping() -> dict[Any, Any]:
    import torch

    return {torch.ops.aten.convolution_backward: conv_backward_flops}


def step_flops(
    model: Any,
    images: Any,
    labels: Any,
    *,
    loss_fn: Any | None = None,
    autocast_dtype: Any | None = None,
    device_type: str = "cpu",
) -> StepFlops:
    """Forward + backward FLOPs of one training step on (images, labels), and the forward alone, per image.

    The step leaves no trace: no optimizer steps, the gradients the parameters held before are put
    back (None stays None), buffers (BN running statistics, num_batches_tracked) are restored, and
    the module's train/eval mode is restored. The model runs in train mode, as in training.
    `loss_fn` defaults to cross entropy; `autocast_dtype` (e.g. torch.bfloat16) runs the step
    under torch.autocast(device_type) as training would.
    """
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    batch = int(images.shape[0])
    if batch <= 0:
        raise ValueError("flops_per_image needs a non-empty batch")
    loss_fn = loss_fn if loss_fn is not None else torch.nn.functional.cross_entropy
    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}
    params = list(model.parameters())
    saved_grads = [p.grad for p in params]
    was_training = model.training
    for p in params:
        p.grad = None  # backward must not accumulate into the caller's gradients
    model.train()
    try:
        with FlopCounterMode(display=False, custom_mapping=step_flop_mapping()) as counter:
            with torch.autocast(device_type=device_type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
                loss = loss_fn(model(images), labels)
            forward = counter.get_total_flops()  # the sum so far: the forward and the loss
            loss.backward()
        total = counter.get_total_flops()
        matmul = matmul_flops(counter.get_flop_counts())
    finally:
        for p, g in zip(params, saved_grads, strict=True):
            p.grad = g
        with torch.no_grad():
            for name, b in model.named_buffers():
                if name in buffers:
                    b.copy_(buffers[name])
        model.train(was_training)
    return StepFlops(
        per_image=float(total) / batch, forward_per_image=float(forward) / batch, matmul_per_image=matmul / batch
    )


def flops_per_image(model: Any, images: Any, labels: Any, **kwargs: Any) -> float:
    """Forward + backward FLOPs of one training step per image (see `step_flops`)."""
    return step_flops(model, images, labels, **kwargs).per_image


def forward_flops_per_image(model: Any, images: Any) -> float:
    """Forward FLOPs per image of `model(images)` in eval mode without autograd, e.g. on the meta device."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), FlopCounterMode(display=False, custom_mapping=step_flop_mapping()) as counter:
            model(images)
    finally:
        model.train(was_training)
    return float(counter.get_total_flops()) / int(images.shape[0])
