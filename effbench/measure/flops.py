"""FLOPs per training image, counted by PyTorch on one real step (no hand-written tables).

`torch.utils.flop_counter.FlopCounterMode` counts the FLOPs of the ops that dominate a CNN
(convolutions, matmuls, attention; 2 FLOPs per multiply-add) as they run, forward and backward,
which is the usual numerator for model FLOPs utilisation (MFU). Element-wise ops (BN, activations,
the optimizer) are not counted.

Pass the bare module, not a DDP wrapper: a DDP backward would also run an all-reduce.
"""

from __future__ import annotations

from typing import Any


def flops_per_image(
    model: Any,
    images: Any,
    labels: Any,
    *,
    loss_fn: Any | None = None,
    autocast_dtype: Any | None = None,
    device_type: str = "cpu",
) -> float:
    """Forward + backward FLOPs of one training step on (images, labels), divided by the batch size.

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
        with FlopCounterMode(display=False) as counter:
            with torch.autocast(device_type=device_type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
                loss = loss_fn(model(images), labels)
            loss.backward()
        total = counter.get_total_flops()
    finally:
        for p, g in zip(params, saved_grads):
            p.grad = g
        with torch.no_grad():
            for name, b in model.named_buffers():
                if name in buffers:
                    b.copy_(buffers[name])
        model.train(was_training)
    return float(total) / batch
