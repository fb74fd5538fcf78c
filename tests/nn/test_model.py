import pytest
import torch
from graphs import ATOM_DIMS, BOND_DIMS, random_graph
from torch_geometric.data import Data

from graphormer_sepnorm.data import GraphormerCollator
from graphormer_sepnorm.nn import (
    Graphormer,
    GraphormerConfig,
    GraphTokenBatchNorm,
    SepNorm,
    ShareNorm,
    set_backend,
)

collate = GraphormerCollator()
BACKENDS = ["reference", "auto"]


def small_model(backend: str = "auto", **kwargs) -> Graphormer:
    values = dict(num_layers=3, hidden_dim=16, ffn_dim=24, num_heads=4) | kwargs
    config = GraphormerConfig(tuple(ATOM_DIMS), tuple(BOND_DIMS), num_tasks=2, **values)
    return set_backend(Graphormer(config), backend)


def trained_statistics(model: Graphormer) -> Graphormer:
    """One training forward pass, so BatchNorm running statistics are not trivial."""
    model.train()
    with torch.no_grad():
        model(collate([random_graph(n, s, p=0.3) for s, n in enumerate([5, 9, 12, 7])]))
    return model.eval()


def permuted(data: Data, perm: torch.Tensor) -> Data:
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(len(perm))
    return Data(x=data.x[perm], edge_index=inverse[data.edge_index], edge_attr=data.edge_attr,
                num_nodes=data.num_nodes)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sepnorm", [True, False])
def test_node_permutation_invariance(sepnorm, backend):
    model = trained_statistics(small_model(backend, sepnorm=sepnorm))
    data = random_graph(11, seed=4, p=0.3)
    perm = torch.randperm(11, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a, b = model(collate([data])), model(collate([permuted(data, perm)]))
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_graph_alone_equals_graph_batched_with_bigger_graphs(backend):
    model = trained_statistics(small_model(backend))
    small = random_graph(4, seed=1, p=0.6)
    others = [random_graph(n, seed=s, p=0.2) for s, n in [(2, 30), (3, 17)]]
    with torch.no_grad():
        alone = model(collate([small]))
        batched = model(collate([others[0], small, others[1]]))
    assert (alone - batched[1:2]).abs().max() <= 1e-5


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sepnorm", [True, False])
def test_every_parameter_gets_a_gradient(sepnorm, backend):
    model = small_model(backend, sepnorm=sepnorm)
    graphs = [random_graph(n, s, p=0.3) for s, n in enumerate([5, 9, 1, 7])]
    model(collate(graphs)).sum().backward()
    no_grad = {n for n, p in model.named_parameters() if p.grad is None or not p.grad.any()}
    # The readout sees only the graph token. Under SepNorm the atoms' norm before the last
    # feed-forward block and in the final norm touch only atoms, which reach nothing after them.
    expected = {"layers.2.ffn_norm.tok_norm.weight", "layers.2.ffn_norm.tok_norm.bias",
                "final_norm.tok_norm.weight", "final_norm.tok_norm.bias"} if sepnorm else set()
    assert no_grad == expected


def test_trains_under_cpu_bf16_autocast():
    """``--trainer.precision bf16-mixed`` on the CPU (the reference runs under autocast)."""
    model = small_model().train()
    graphs = [random_graph(n, s, p=0.3) for s, n in enumerate([5, 9, 1, 7, 30])]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(collate(graphs))
    out.float().sum().backward()
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert len(grads) > 20 and all(torch.isfinite(g).all() for g in grads)


def test_float64_gradients_match_finite_differences():
    """The CPU backend's own backwards (attention block, head split, hop sums, group biases,
    fused SepNorm) in one gradcheck."""
    torch.manual_seed(0)
    model = small_model("cpu", num_layers=2, hidden_dim=8, ffn_dim=8, num_heads=2, dropout=0.0,
                        attention_dropout=0.0, activation_dropout=0.0,
                        multi_hop_max_dist=3).double().train()
    # sizes apart enough for two attention groups; one disconnected graph
    graphs = [random_graph(n, s, p=0.4) for s, n in enumerate([3, 4, 12])]
    graphs.append(random_graph(6, seed=7, p=0.05))
    batch = collate(graphs)
    names = ["layers.0.attention.qkv.weight", "layers.1.attention.out.weight",
             "attention_bias.edge.hop_weight", "attention_bias.spatial.embedding.weight"]
    params = dict(model.named_parameters())

    def outputs(*values):
        chosen = dict(zip(names, values, strict=True))
        return torch.func.functional_call(model, {**params, **chosen}, (batch,))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("graphormer_sepnorm.nn.cpu.size_groups.GROUP_OVERHEAD", 0)
        assert torch.autograd.gradcheck(outputs, [params[n].detach().requires_grad_()
                                                  for n in names])


def test_overfits_32_random_graphs():
    torch.manual_seed(0)
    graphs = [random_graph(4 + s % 9, seed=s, p=0.35) for s in range(32)]
    for s, g in enumerate(graphs):
        g.y = torch.tensor([float(s % 5) - 2.0, float(g.num_nodes) / 4])
    batch = collate(graphs)
    model = small_model(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                        hidden_dim=32, ffn_dim=32)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(250):
        optimizer.zero_grad()
        loss = (model(batch) - batch.y).abs().mean()
        loss.backward()
        optimizer.step()
    assert loss < 0.1, loss  # from ~1.6 at initialization
    # BatchNorm's running statistics lag weights that move this fast; refreshed, eval agrees.
    with torch.no_grad():
        for _ in range(50):
            model(batch)
        final = (model.eval()(batch) - batch.y).abs().mean()
    assert final < 0.1, final


def test_sepnorm_sites_are_configurable():
    model = small_model(sepnorm_sites=("final",))
    assert isinstance(model.final_norm, SepNorm)
    assert all(isinstance(layer.attn_norm, ShareNorm) and isinstance(layer.ffn_norm, ShareNorm)
               for layer in model.layers)
    share = small_model(sepnorm=False)
    assert not any(isinstance(m, GraphTokenBatchNorm) for m in share.modules())
    with pytest.raises(ValueError, match="sites"):
        small_model(sepnorm_sites=("embedding",))
    with pytest.raises(ValueError, match="divisible"):
        small_model(num_heads=5)


def test_single_graph_training_batch_and_embeddings():
    model = small_model().train()
    batch = collate([random_graph(6, seed=0, p=0.4)])
    assert model(batch).shape == (1, 2)
    assert model.embed(batch).shape == (1, 16)


def test_wrong_number_of_feature_columns_is_reported():
    model = small_model()
    data = random_graph(5, seed=0, p=0.5)
    data.x = data.x[:, :1]
    with pytest.raises(ValueError, match="feature columns"):
        model(collate([data]))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("tok_norm", ["layer", "batch"])
def test_graph_token_only_shortcut_equals_the_full_encoder(tok_norm, backend):
    model = trained_statistics(small_model(backend, tok_norm=tok_norm))
    batch = collate([random_graph(n, s, p=0.3) for s, n in enumerate([5, 9, 3])])
    with torch.no_grad():
        tokens, _ = model.encode(batch)
        torch.testing.assert_close(model.embed(batch), tokens[:, 0], atol=1e-5, rtol=1e-5)
    assert tokens.shape == (3, 10, 16)


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_graph_token_batch_norm_sees_copies_of_one_vector(backend):
    # Layer 0 receives the graph token as one learned vector, the same in every graph: a
    # BatchNorm there would see zero variance, its running variance would decay to 0, and
    # evaluation would divide the running mean's lag behind the moving parameter by sqrt(eps).
    model = small_model(backend, dropout=0.0).train()
    model(collate([random_graph(n, s, p=0.3) for s, n in enumerate([5, 9, 12, 7])]))
    norms = {name: m for name, m in model.named_modules() if isinstance(m, GraphTokenBatchNorm)}
    assert len(norms) == 3 * 2 - 1 + 1  # every SepNorm site but layer 0's attention norm
    assert "layers.0.attn_norm.cls_norm" not in norms
    for name, norm in norms.items():
        # one update from 1 with momentum 0.1: 0.9 + 0.1 * the batch's (unbiased) variance
        batch_variance = (norm.running_var - 0.9) / 0.1
        assert batch_variance.min() > 1e-8, name


@pytest.mark.parametrize("hidden", [0, 12])
def test_head_reads_molecule_features_beside_the_graph_token(hidden):
    torch.manual_seed(0)
    model = small_model(mol_feature_dim=3, head_hidden_dim=hidden, dropout=0.0).eval()
    graphs = [random_graph(n, s, p=0.3) for s, n in enumerate([5, 9])]
    features = torch.tensor([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]])
    for graph, row in zip(graphs, features, strict=True):
        graph.mol_x = row.reshape(1, -1)
    batch = collate(graphs)
    with torch.no_grad():
        embedding = model.embed(batch)
        expected = model.head(torch.cat([embedding, features], dim=1))
        torch.testing.assert_close(model(batch), expected)
        batch.mol_x = batch.mol_x.flip(0)  # other features, same graphs: other outputs
        assert not torch.allclose(model(batch), expected)
    assert isinstance(model.head, torch.nn.Linear) == (hidden == 0)
    batch.mol_x = None
    with pytest.raises(ValueError, match="reads 3 molecule features, the batch has None"):
        model(batch)
