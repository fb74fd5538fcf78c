"""``nn.compiling``: every compile of the package gets its mode's options and the fix."""

import torch

from graphormer_sepnorm.nn import compiling
from graphormer_sepnorm.nn.compiling import compile_kwargs, compiled


def test_a_mode_is_spelled_out_as_its_options_with_the_workaround() -> None:
    assert compile_kwargs("reduce-overhead", dynamic=True) == {
        "options": {"triton.cudagraphs": True, "triton.coalesce_tiling_analysis": False},
        "dynamic": True}
    assert compile_kwargs() == {"options": {"triton.coalesce_tiling_analysis": False}}
    assert compile_kwargs("default", fullgraph=True)["fullgraph"] is True


def test_an_option_this_torch_lacks_is_left_out(monkeypatch) -> None:
    monkeypatch.setattr(compiling, "INDUCTOR_WORKAROUNDS",
                        {"triton.no_such_option": 1, "no_such_group.option": 2,
                         "triton.coalesce_tiling_analysis": False})
    assert compile_kwargs()["options"] == {"triton.coalesce_tiling_analysis": False}


def test_torch_compile_takes_them_and_the_function_computes_the_same() -> None:
    """``torch.compile`` checks the options' names when called (an unknown one raises)."""
    torch.compile(torch.sin, **compile_kwargs("reduce-overhead"))
    torch.compile(torch.nn.Linear(2, 2), **compile_kwargs("max-autotune-no-cudagraphs"))
    x = torch.linspace(-2, 2, 7)
    fn = compiled(lambda t: torch.tanh(t) * 2, backend="eager", fullgraph=True)
    torch.testing.assert_close(fn(x), torch.tanh(x) * 2)
