"""AdamW for packed replicas: each replica's gradient clipped by its own norm, in one step.

Packed replicas keep all their parameters in one ``[R, N]`` tensor
(``PackedReplicas.flat``). Clipping each replica's
gradient to its own norm is then one reduction over ``N`` and AdamW one elementwise pass, for
any number of replicas and parameter tensors: :func:`adamw_step_` does both, and
:class:`FlatAdamW` runs it, compiled with the model's ``torch.compile`` mode when there is one
(a reduction and an elementwise kernel). Per-tensor clipping and ``torch.optim.AdamW`` took
three kernels per parameter tensor for the norms and the scaling alone (about 600 for
Graphormer-slim), outside any compiled graph.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor

from graphormer_sepnorm.nn.compiling import compiled


def adamw_step_(param: Tensor, grad: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor, step: Tensor,
                lr: Tensor, beta1: float, beta2: float, eps: float, weight_decay: float,
                max_norm: float | None = None, clip_value: float | None = None,
                decay_mask: Tensor | None = None) -> None:
    """One AdamW step of ``[R, ...]`` parameters, each replica clipped by its own norm, in place.

    As ``torch.nn.utils.clip_grad_norm_`` in each replica (factor
    ``min(1, max_norm / (norm + 1e-6))``, the norm over all of the replica's gradient) or
    ``clip_grad_value_`` (``clip_value``), then ``torch.optim.AdamW``'s update (decoupled weight
    decay, bias-corrected moments).

    Args:
        param: ``[R, ...]``, updated in place.
        grad: ``[R, ...]``, left as it is.
        exp_avg: ``[R, ...]`` first moment (zeros at the start), updated in place.
        exp_avg_sq: ``[R, ...]`` second moment (zeros at the start), updated in place.
        step: ``[]`` steps taken, incremented here.
        lr: ``[]`` learning rate (a tensor: a new rate is no new graph when compiled).
        beta1: first moment's decay.
        beta2: second moment's decay.
        eps: added to the denominator.
        weight_decay: decoupled weight decay.
        max_norm: clip each replica's gradient to this norm; ``None``: no norm clipping.
        clip_value: clip each element to ``[-clip_value, clip_value]``; ``None``: not.
        decay_mask: 0 where a parameter gets no weight decay, 1 elsewhere (broadcast against
            ``param``): a single run's AdamW skips a parameter that has no gradient at all.
    """
    if clip_value is not None:
        grad = grad.clamp(-clip_value, clip_value)
    if max_norm is not None:
        sums = grad.to(torch.promote_types(grad.dtype, torch.float32)).pow(2).flatten(1).sum(1)
        factor = (max_norm / (sums.sqrt() + 1e-6)).clamp(max=1.0)
        grad = grad * factor.to(grad.dtype).view(-1, *[1] * (grad.dim() - 1))
    step.add_(1)
    param.mul_(1 - lr * weight_decay * (1.0 if decay_mask is None else decay_mask))
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    step_size = lr / (1 - beta1 ** step)
    denom = (exp_avg_sq.sqrt() / (1 - beta2 ** step).sqrt()).add_(eps)
    param.sub_(exp_avg / denom * step_size)


class FlatAdamW(torch.optim.Optimizer):
    """``torch.optim.AdamW`` over ``[R, ...]`` parameters, clipping each replica by its norm.

    Lightning's gradient clipping reaches it through :meth:`clip` (the packed module's
    ``configure_gradient_clipping``), so the clipping runs inside :meth:`step`, in the same
    compiled function as the update. Its state (``step``, ``exp_avg``, ``exp_avg_sq``) has
    ``torch.optim.AdamW``'s names and lives on the parameters' device.

    Args:
        params: the parameters, ``[R, ...]`` each (packed replicas: ``[model.flat]``), or
            parameter groups; a group's ``decay_mask`` (0 or 1, broadcast against its
            parameters) exempts elements from weight decay.
        lr: learning rate. Default: 1e-3.
        betas: Default: (0.9, 0.999).
        eps: Default: 1e-8.
        weight_decay: decoupled, as AdamW's. Default: 0.01.
        compile: a ``torch.compile`` mode for the step (``'reduce-overhead'``: in a CUDA
            graph); ``None``: eager, about a dozen operations on ``[R, N]``.
    """

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01, compile: str | None = None) -> None:
        # capturable: a loaded checkpoint's step counters go to the parameters' device
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                    "capturable": True}
        super().__init__(params, defaults)
        self.max_norm: float | None = None
        self.clip_value: float | None = None
        self.compile_mode = compile
        self._update: Callable[..., None] = (
            compiled(adamw_step_, compile, fullgraph=True) if compile else adamw_step_)
        self._lr: dict[tuple[torch.device, torch.dtype], Tensor] = {}

    def clip(self, value: float | None, algorithm: str | None = "norm") -> None:
        """Clip gradients in the next steps: by each replica's norm, or by ``value``."""
        by_value = algorithm == "value"
        self.max_norm = None if by_value or not value else float(value)
        self.clip_value = float(value) if by_value and value else None

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Clips each replica's gradient and takes one AdamW step."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self._state(param)
                lr = self._lr_tensor(state["step"])
                lr.fill_(group["lr"])
                self._update(param, param.grad, state["exp_avg"], state["exp_avg_sq"],
                             state["step"], lr, beta1, beta2, group["eps"],
                             group["weight_decay"], self.max_norm, self.clip_value,
                             self._decay_mask(group, param))
        return loss

    def _state(self, param: Tensor) -> dict[str, Tensor]:
        state = self.state[param]
        if not state:
            # float32 counters (float64 for float64 parameters, whose tests compare exactly)
            dtype = torch.promote_types(param.dtype, torch.float32)
            state["step"] = torch.zeros((), dtype=dtype, device=param.device)
            state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        if self.compile_mode and not getattr(param, "_flat_adamw_static", False):
            for value in (param, *state.values()):  # what a CUDA graph mutates: fixed addresses
                torch._dynamo.mark_static_address(value)
            param._flat_adamw_static = True
        return state

    def _decay_mask(self, group: dict[str, Any], param: Tensor) -> Tensor | None:
        """The group's ``decay_mask`` on ``param``'s device (moved once, kept in the group).

        The step indexes parameters with it, so it must live on their device.
        """
        mask = group.get("decay_mask")
        if mask is None:
            return None
        if mask.device != param.device:
            mask = group["decay_mask"] = mask.to(param.device)
        if self.compile_mode and not getattr(mask, "_flat_adamw_static", False):
            torch._dynamo.mark_static_address(mask)  # a CUDA graph input: no copy per step
            mask._flat_adamw_static = True
        return mask

    def _lr_tensor(self, like: Tensor) -> Tensor:
        """The learning rate as a tensor of ``like``'s dtype and device."""
        key = (like.device, like.dtype)
        if key not in self._lr:
            self._lr[key] = torch.zeros((), dtype=like.dtype, device=like.device)
            if self.compile_mode:
                torch._dynamo.mark_static_address(self._lr[key])
        return self._lr[key]
