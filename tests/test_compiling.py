"""``graphormer_sepnorm.compiling``: every compile gets its mode's options plus the workarounds."""

import torch

from graphormer_sepnorm import compiling
from graphormer_sepnorm.compiling import compile_kwargs, compiled


def test_a_mode_is_spelled_out_as_its_options_with_the_workarounds() -> None:
    assert compile_kwargs("reduce-overhead", dynamic=True) == {
        "options": {"triton.cudagraphs": True, "triton.coalesce_tiling_analysis": False,
                    "combo_kernels": True},
        "dynamic": True}
    assert compile_kwargs() == {"options": {"triton.coalesce_tiling_analysis": False,
                                            "combo_kernels": True}}
    assert compile_kwargs("default", fullgraph=True)["fullgraph"] is True


def test_combo_kernels_can_be_turned_off(monkeypatch) -> None:
    monkeypatch.setattr(compiling, "COMBO_KERNELS", False)
    assert compile_kwargs() == {"options": {"triton.coalesce_tiling_analysis": False}}


def test_combo_kernels_leave_a_cpu_compile_as_it_computes() -> None:
    """Inductor groups only Triton kernels; on the CPU a compile with them computes the same."""
    x = torch.linspace(-2, 2, 12).view(3, 4)

    def two_independent(t):
        return torch.sin(t) * 2, t.sum(0) + 1, torch.cos(t[:, :2])

    got = compiled(two_independent, fullgraph=True)(x)
    for ours, theirs in zip(got, two_independent(x), strict=True):
        torch.testing.assert_close(ours, theirs)


def test_an_option_this_torch_lacks_is_left_out(monkeypatch) -> None:
    monkeypatch.setattr(compiling, "INDUCTOR_WORKAROUNDS",
                        {"triton.no_such_option": 1, "no_such_group.option": 2,
                         "triton.coalesce_tiling_analysis": False})
    monkeypatch.setattr(compiling, "COMBO_KERNELS", False)
    assert compile_kwargs()["options"] == {"triton.coalesce_tiling_analysis": False}


def test_torch_compile_takes_them_and_the_function_computes_the_same() -> None:
    """``torch.compile`` checks the options' names when called (an unknown one raises)."""
    torch.compile(torch.sin, **compile_kwargs("reduce-overhead"))
    torch.compile(torch.nn.Linear(2, 2), **compile_kwargs("max-autotune-no-cudagraphs"))
    x = torch.linspace(-2, 2, 7)
    fn = compiled(lambda t: torch.tanh(t) * 2, backend="eager", fullgraph=True)
    torch.testing.assert_close(fn(x), torch.tanh(x) * 2)


def test_a_graphormer_compiles_with_the_workarounds_unless_told_otherwise(monkeypatch) -> None:
    """``model.compile()`` as a user calls it gets them; other backends or options pass as
    given."""
    from graphormer_sepnorm.nn import Graphormer, GraphormerConfig

    calls = []
    monkeypatch.setattr(torch, "compile", lambda fn, *args, **kwargs: calls.append(kwargs) or fn)
    model = Graphormer(GraphormerConfig((4,), (2,), num_layers=1, hidden_dim=8, ffn_dim=8,
                                        num_heads=2))
    model.compile(mode="reduce-overhead", dynamic=False)
    model.compile()
    model.compile(backend="aot_eager")
    model.compile(options={"max_autotune": True})
    assert calls == [compile_kwargs("reduce-overhead", dynamic=False), compile_kwargs(),
                     {"backend": "aot_eager"}, {"options": {"max_autotune": True}}]
