"""Issue 19's formulas and rules: subclasses that override forward, the RNN family on every
device, SDPA's flop_counter count per device, the new op families (by hand or FlopCounterMode),
custom_formulas, sparse inputs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import torch_flops
from torch_flops.records import Status


def _fcm(fn) -> int:
    with FlopCounterMode(display=False) as mode:
        fn()
    return mode.get_total_flops()


def _aten(fn, *args) -> torch_flops.Profile:
    """A profile of ``fn(*args)`` as a module (the eager front end records its aten ops)."""
    class Call(nn.Module):
        def forward(self, *xs):
            return fn(*xs)
    return torch_flops.profile(Call(), *args)


def _counted(p: torch_flops.Profile, target: str) -> int:
    """The FLOPs of the nodes whose target ends with ``target`` (all of them counted)."""
    rows = [r for r in p.records if r.target.endswith(target)]
    assert rows and all(r.status is Status.COUNTED for r in rows), [(r.target, r.status) for r in p.records]
    return sum(r.flops for r in rows)


# ------------------------------------------------------------------ subclasses overriding forward
class Head(nn.Conv1d):
    def forward(self, x):  # (B, T, C) -> (B, C, T) first
        return super().forward(x.transpose(1, 2))


class Router(nn.Linear):
    def forward(self, x):
        logits = super().forward(x)
        return logits, logits.softmax(-1)


class KeepsForward(nn.Linear):
    pass


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.head, self.router, self.keep = Head(16, 32, 3), Router(32, 4), KeepsForward(4, 4)

    def forward(self, x):
        _, p = self.router(self.head(x).transpose(1, 2))
        return self.keep(p)


def test_resolve_module_needs_the_parents_forward() -> None:
    table = torch_flops.formulas.FORMULAS
    assert table.resolve_module(KeepsForward) is not None
    assert table.resolve_module(Head) is None and table.resolve_module(Router) is None


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("tracer", ["auto", "fx"])
def test_subclass_overriding_forward_is_recorded_by_its_ops(device: str, tracer: str) -> None:
    model, x = Net().to(device), torch.randn(2, 10, 16, device=device)
    p = torch_flops.profile(model, x, tracer=tracer)
    # conv: (2, 32, 8) outputs x 16*3 MACs = 24,576 MACs -> 49,152 + 512 bias = 49,664;
    # router: (2, 8, 4) x 32 = 2,048 MACs -> 4,096 + 64 bias; softmax 5 x 64 = 320;
    # keep: (2, 8, 4) x 4 = 256 MACs -> 512 + 64 bias = 576
    assert p.total_flops == 49_664 + 4_160 + 320 + 576
    assert p.with_convention("flop_counter").total_flops == _fcm(lambda: model(x)) == 2 * (24_576 + 2_048 + 256)
    recorded = {r.module_path for r in p.records if r.target in ("torch.conv1d", "F.linear")}
    assert {"head", "router"} <= recorded  # by their ops (fx also traces through the user's KeepsForward)


# ------------------------------------------------------------------ RNNs
def _decomposed(model: nn.Module, x) -> tuple[int, int]:
    """The count of the module's own aten ops (its formula removed): meta's composite ATen."""
    counter = torch_flops.TorchFLOPsByFX(model, custom_formulas={type(model): None})
    with torch.no_grad():
        counter.propagate(x)
    assert not [r for r in counter.records if r.status is Status.UNSUPPORTED]
    return counter.profile.total_flops, counter.profile.total_macs


@pytest.mark.parametrize("cls,kw", [
    (nn.LSTM, {"num_layers": 2, "bidirectional": True}), (nn.LSTM, {"proj_size": 4}), (nn.LSTM, {"bias": False}),
    (nn.GRU, {"num_layers": 2, "dropout": 0.3}), (nn.RNN, {"nonlinearity": "relu"}),
])
def test_rnn_formula_equals_the_composite_on_meta(cls, kw) -> None:
    model = cls(8, 16, batch_first=True, **kw).to("meta").train()
    x = torch.empty(3, 5, 8, device="meta")
    p = torch_flops.profile(model, x)
    assert (p.total_flops, p.total_macs) == _decomposed(model, x)
    assert p.with_convention("flop_counter").total_flops == _fcm(lambda: model(x))


def test_lstm_counts_the_same_on_cpu_and_meta() -> None:
    model, x = nn.LSTM(8, 16, batch_first=True), torch.randn(3, 5, 8)
    cpu = torch_flops.profile(model, x)
    meta = torch_flops.profile(model.to("meta"), x.to("meta"))
    # per step and row: 4*16*(8+16) = 1,536 MACs; 2 biases 128; gates 19*16 = 304 -> 3,504; x 15
    assert cpu.total_macs == meta.total_macs == 15 * 1_536
    assert cpu.total_flops == meta.total_flops == 15 * 3_504 == 52_560
    # FlopCounterMode: the CPU oneDNN kernel (mkldnn_rnn_layer) 0, meta's addmm all
    assert cpu.with_convention("flop_counter").total_flops == 0
    assert meta.with_convention("flop_counter").total_flops == 2 * 15 * 1_536
    # the CPU kernel itself, recorded when the module's formula is removed, counts the same
    counter = torch_flops.TorchFLOPsByFX(nn.Sequential(nn.LSTM(8, 16, batch_first=True)),
                                         custom_formulas={nn.LSTM: None})
    with torch.no_grad():
        counter.propagate(x)
    assert [r.target for r in counter.records if r.flops] == ["aten.mkldnn_rnn_layer"]
    assert counter.profile.total_flops == 52_560


def test_gru_on_cpu_matches_flop_counter_mode() -> None:
    model, x = nn.GRU(8, 16, num_layers=2), torch.randn(5, 3, 8)
    p = torch_flops.profile(model, x)
    assert p.with_convention("flop_counter").total_flops == _fcm(lambda: model(x)) > 0


@pytest.mark.parametrize("cls", [nn.GRU, nn.LSTM, nn.RNN])
def test_a_recurrent_layer_as_the_model_is_the_one_node_it_is_inside_a_model(cls) -> None:
    # its forward calls torch's fused op through torch._VF, which no function mode sees: as the model it
    # was recorded as that kernel's aten ops; now one node, counted as inside any model, and a training
    # step leaves the same parameters, with forward + backward = FlopCounterMode's in its convention
    torch.manual_seed(0)
    layer, x = cls(4, 6, batch_first=True), torch.randn(2, 3, 4)
    twin = cls(4, 6, batch_first=True)
    twin.load_state_dict(layer.state_dict())
    inside = torch_flops.profile(nn.Sequential(layer), x)
    alone = torch_flops.profile(layer, x)
    assert [r.target for r in alone.records if r.op == "call_module"] == [cls.__name__]
    assert (alone.total_flops, alone.total_macs) == (inside.total_flops, inside.total_macs) > (0, 0)
    opt, opt2 = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (layer, twin))
    profiler = torch_flops.TrainingProfiler(layer, opt)
    profiler.start_profile()
    layer(x)[0].sum().backward()
    opt.step()
    profiler.stop_profile()
    [step] = profiler.profiles
    profiler.end_profile()
    with FlopCounterMode(display=False) as reference:
        twin(x)[0].sum().backward()
    opt2.step()
    counted = step.with_convention("flop_counter")
    assert counted.total_flops + counted.total_backward_flops == reference.get_total_flops()
    assert all(torch.equal(a, b) for a, b in zip(layer.parameters(), twin.parameters()))


# ------------------------------------------------------------------ SDPA per device
def test_sdpa_flop_counter_convention_follows_the_device() -> None:
    q = torch.randn(1, 4, 8, 16)
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v)
    macs = 2 * 4 * 8 * 8 * 16  # Q K^T and P V
    cpu = _aten(fn, q, q, q)
    meta = _aten(fn, *(t.to("meta") for t in (q, q, q)))
    assert cpu.total_macs == meta.total_macs == macs and cpu.total_flops == meta.total_flops
    assert cpu.with_convention("flop_counter").total_flops == _fcm(lambda: fn(q, q, q)) == 0  # CPU flash kernel
    assert meta.with_convention("flop_counter").total_flops == 2 * macs
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):  # the math path: bmm, counted
        math = _aten(fn, q, q, q)
        assert math.with_convention("flop_counter").total_flops == _fcm(lambda: fn(q, q, q)) == 2 * macs


# ------------------------------------------------------------------ new op families, by hand
def test_grid_sample() -> None:
    x, grid = torch.randn(2, 3, 8, 8), torch.rand(2, 4, 5, 2) * 2 - 1
    p = _aten(lambda x, g: F.grid_sample(x, g, align_corners=False), x, grid)
    # 40 points x 2 coordinates x 3 (unnormalise) + 120 outputs x 9 (bilinear) = 240 + 1,080
    assert _counted(p, "grid_sample") == 1_320
    p = _aten(lambda x, g: F.grid_sample(x, g, mode="nearest", padding_mode="border", align_corners=True), x, grid)
    assert _counted(p, "grid_sample") == 40 * 2 * (3 + 2)  # border clamps: 2 per coordinate


def test_solve_triangular() -> None:
    a, b = torch.randn(2, 5, 5).triu() + 5 * torch.eye(5), torch.randn(2, 5, 3)
    p = _aten(lambda a, b: torch.linalg.solve_triangular(a, b, upper=True), a, b)
    assert _counted(p, "solve_triangular") == 30 * 5  # n per solution element
    p = _aten(lambda a, b: torch.linalg.solve_triangular(a, b, upper=True, unitriangular=True), a, b)
    assert _counted(p, "solve_triangular") == 30 * 4


def test_fft_family() -> None:
    x = torch.randn(4, 16)
    assert _counted(_aten(lambda x: torch.fft.fft(x.to(torch.complex64)), x), "aten._fft_c2c") == 4 * 5 * 16 * 4
    assert _counted(_aten(torch.fft.rfft, x), "aten._fft_r2c") == 4 * 160  # 2.5 N log2 N, N = 16
    # ortho: 2 per complex output element (4 x 9)
    assert _counted(_aten(lambda x: torch.fft.rfft(x, norm="ortho"), x), "aten._fft_r2c") == 640 + 2 * 36
    spectrum = torch.randn(4, 9, dtype=torch.complex64)
    assert _counted(_aten(torch.fft.irfft, spectrum), "aten._fft_c2r") == 640 + 64  # + 1 per real output (by 1/n)
    # fft2 of real data: cast to complex, one c2c transform of 4 x 8 = 32 points per batch of 2
    assert _counted(_aten(torch.fft.fft2, torch.randn(2, 4, 8)), "aten._fft_c2c") == 2 * 5 * 32 * 5


def test_cdist_polar_scatter_reduce_search() -> None:
    a, b = torch.randn(2, 30, 5), torch.randn(2, 40, 5)
    p = _aten(torch.cdist, a, b)  # > 25 rows: the matmul path, _euclidean_dist
    outputs = 2 * 30 * 40
    assert _counted(p, "aten._euclidean_dist") == 2 * outputs * 7 + 3 * 300 + 2 * 400 + 2 * outputs
    assert p.with_convention("flop_counter").total_flops == _fcm(lambda: torch.cdist(a, b)) == 0
    p = _aten(lambda a, b: torch.cdist(a, b, p=1), a[:, :3], b[:, :3])
    assert _counted(p, "aten._cdist_forward") == (2 * 3 * 3) * 3 * 5  # (2, 3, 3) outputs x 3 per dim
    assert _counted(_aten(torch.polar, torch.rand(6), torch.rand(6)), "polar") == 24
    src = torch.randn(10)
    p = _aten(lambda s: torch.zeros(3).scatter_reduce(0, torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 2, 0]), s, "mean"), src)
    assert _counted(p, "scatter_reduce") == 10 + 3
    boundaries = torch.linspace(0, 1, 7)
    assert _counted(_aten(torch.bucketize, torch.rand(4, 5), boundaries), "bucketize") == 20 * 3
    assert _counted(_aten(torch.isin, torch.rand(20), torch.rand(3)), "isin") == 60  # 3 < 10 * 20^0.145
    # torch.unique is one node (its formula is aten._unique2's), so fx and eager count it alike
    assert _counted(_aten(lambda x: torch.unique(x), torch.rand(8)), "torch.unique") == 8 * (3 + 1)
    probs = torch.rand(2, 8)
    assert _counted(_aten(lambda p: torch.multinomial(p, 3), probs), "multinomial") == 2 * 2 * 8
    ints = _aten(torch.isin, torch.arange(10), torch.arange(3))
    assert ints.total_flops == 0 and not [r for r in ints.records if r.status is Status.UNSUPPORTED]


def test_zero_list_additions() -> None:
    zero = torch_flops.formulas.zero
    for name in ("_is_all_true", "_linalg_check_errors", "reshape_as", "_add_batch_dim", "bernoulli_", "uniform_"):
        assert torch_flops.formulas.FORMULAS.resolve_aten(getattr(torch.ops.aten, name)) is not None, name
    from torch._functorch import predispatch
    for fn in (predispatch._vmap_increment_nesting, predispatch._add_batch_dim, predispatch.lazy_load_decompositions):
        assert fn in zero.GRAPH_PLUMBING and torch_flops.formulas.FORMULAS.resolve_function(fn) is not None


@pytest.mark.filterwarnings("ignore")
def test_sparse_inputs_profile() -> None:
    dense = torch.randn(4, 5)
    for sparse in (dense.to_sparse(), dense.to_sparse_csr()):
        weight = torch.randn(5, 3)
        p = _aten(torch.sparse.mm if sparse.layout == torch.sparse_coo else torch.mm, sparse, weight)
        assert p.records  # profiled, bytes counted without a crash
        assert all(r.bytes_read is not None for r in p.records if r.op not in ("placeholder", "output"))


@pytest.mark.parametrize("tracer", ["auto", "fx", "export"])
def test_sparse_mm_counts_the_stored_elements_on_every_front_end(tracer: str) -> None:
    # a (5, 6) COO matrix with 4 stored elements times a (6, 4) weight: 4 x 4 = 16 MACs, 32 FLOPs. fx kept
    # torch.sparse.mm whole and counted it through meta copies of its arguments, which a sparse tensor has
    # not: 0, unsupported
    class Sparse(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(6, 4))

        def forward(self, a: torch.Tensor) -> torch.Tensor:
            return torch.sparse.mm(a, self.w)

    a = torch.sparse_coo_tensor(torch.tensor([[0, 1, 2, 4], [1, 3, 5, 0]]), torch.randn(4), (5, 6))
    counter = torch_flops.TorchFLOPsByFX(Sparse(), tracer=tracer)
    counter.propagate(a)
    assert (counter.total_flops, counter.total_macs) == (32, 16)


# ------------------------------------------------------------------ custom_formulas
def test_custom_formulas_override_and_remove() -> None:
    model, x = nn.Sequential(nn.Linear(4, 4), nn.ReLU()), torch.randn(2, 4)
    p = torch_flops.profile(model, x, custom_formulas={nn.Linear: lambda module, out, x: (7, 3)})
    assert [(r.target, r.flops, r.macs) for r in p.records if r.flops] == [("Linear", 7, 3), ("ReLU", 8, 0)]
    p = torch_flops.profile(model, x, custom_formulas={nn.ReLU: None})  # recorded as its F.relu call
    assert [r.target for r in p.records if r.flops] == ["Linear", "F.relu"]
    assert torch_flops.formulas.FORMULAS.resolve_module(nn.ReLU) is not None  # the package's table untouched
    with pytest.raises(TypeError, match="custom_formulas"):
        torch_flops.TorchFLOPsByFX(model, custom_formulas={nn.Linear: 3})
    with pytest.raises(TypeError, match="custom_formulas"):
        torch_flops.TorchFLOPsByFX(model, custom_formulas=[nn.Linear])


def test_the_tensors_of_a_tuple_inside_a_node_s_output_are_read_through_getitems() -> None:
    # an LSTM returns (output, (h, c)); a model returning it whole read h and c as constants of the graph
    # (get_attr _tensor_constant0/1): they are the LSTM node's, through getitem [1] then [0] and [1]
    class Seq(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.LSTM(4, 6)

        def forward(self, x: torch.Tensor) -> object:
            return self.rnn(x)

    model, x = Seq(), torch.randn(3, 2, 4)
    counter = torch_flops.TorchFLOPsByFX(model)
    out = counter.propagate(x)
    assert not [r for r in counter.records if r.op == "get_attr" and r.name.startswith("_tensor_constant")]
    graph = counter.capture.graphs[0].graph_module.graph
    reads = {str(n.args[1]) + ":" + str(n.args[0].args[1] if n.args[0].op == "call_function" else "")
             for n in graph.nodes if n.op == "call_function" and n.args and isinstance(n.args[0], torch.fx.Node)}
    assert {"0:", "1:", "0:1", "1:1"} <= reads  # output[0], output[1], output[1][0], output[1][1]
    expected = model(x)
    assert torch.equal(out[0], expected[0]) and torch.equal(out[1][0], expected[1][0])


# ------------------------------------------------------------------ fault round 32: sparse and nested
def test_sparse_mm_counts_the_stored_elements() -> None:
    # a 3 x 5 sparse with 4 stored elements times a 5 x 2 dense: each stored element multiplies a row of 2,
    # 4 x 2 = 8 MACs, 16 FLOPs; addmm adds the 3 x 2 input: + 6. FlopCounterMode counts neither: 0
    i = torch.tensor([[0, 0, 1, 2], [1, 4, 2, 0]])
    s = torch.sparse_coo_tensor(i, torch.randn(4), (3, 5), check_invariants=True)
    d = torch.randn(5, 2)
    for fn, expected in ((torch.sparse.mm, 16), (lambda a, b: torch.sparse.addmm(torch.zeros(3, 2), a, b), 22),
                         (lambda a, b: torch.sparse.mm(a.to_sparse_csr(), b), 16)):
        p = _aten(fn, s, d)
        assert p.total_flops == expected and not p.unsupported
        assert p.with_convention("flop_counter").total_flops == _fcm(lambda fn=fn: fn(s, d)) == 0
    # torch.mm / @ on the sparse factor run the same kernel: 16 too; FlopCounterMode counts them as a dense
    # product, 2 x 3 x 5 x 2 = 60, which its convention keeps
    for fn in (torch.mm, lambda a, b: a @ b):
        p = _aten(fn, s, d)
        assert p.total_flops == 16
        assert p.with_convention("flop_counter").total_flops == _fcm(lambda fn=fn: fn(s, d)) == 60


def test_a_linear_over_a_jagged_nested_tensor_counts_its_backward() -> None:
    # Linear(4, 3) over 2 + 3 rows: autograd runs aten.linear_backward; the weight gradient dY^T @ X is
    # 5 x 3 x 4 = 60 MACs (120 FLOPs) and the bias gradient 15 adds: 135, as the same rows dense
    def lossf(out: torch.Tensor) -> torch.Tensor:
        return (out.values() if out.is_nested else out).pow(2).sum()

    rows = [torch.randn(2, 4), torch.randn(3, 4)]
    backward = {}
    for kind, x in (("jagged", torch.nested.nested_tensor(rows, layout=torch.jagged)), ("dense", torch.cat(rows))):
        torch.manual_seed(0)
        counter = torch_flops.TorchFLOPsByFX(nn.Sequential(nn.Linear(4, 3)))
        counter.propagate(x, loss_fn=lossf)
        linear = [r for r in counter.records if r.target == "Linear"]
        backward[kind] = (linear[0].backward_flops, linear[0].backward_macs)
        assert not counter.profile.unsupported and not counter.profile.backward["unsupported"]  # (prim.layout)
    assert backward == {"jagged": (135, 60), "dense": (135, 60)}


def test_tensors_two_tuples_deep_in_a_node_s_output_are_read_through_a_getitem_per_level() -> None:
    # a module kept whole returning (a, (b, (c, d))); the model multiplies c and d: read as [1][1][0] and
    # [1][1][1] of the node, not as constants (whose memory then dropped out of the live total)
    class Deep(nn.Module):
        def forward(self, x: torch.Tensor) -> object:
            return x + 1, (x * 2, (x - 1, x / 2))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.deep = Deep()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            c, d = self.deep(x)[1][1]
            return c * d

    x = torch.randn(3, 4)
    eager = torch_flops.TorchFLOPsByFX(Model(), leaf_modules=[Deep])
    out = eager.propagate(x)
    fx = torch_flops.TorchFLOPsByFX(Model(), leaf_modules=[Deep], tracer="fx")
    fx.propagate(x)
    assert not [r for r in eager.records if r.op == "get_attr"]
    assert [r.name for r in eager.records if r.target == "operator.getitem"] == ["getitem", "getitem_1", "getitem_2",
                                                                                 "getitem_3"]
    assert torch.equal(out, (x - 1) * (x / 2))
    # the live memory as the fx graph (which reads the same items) replays it
    assert [r.mem_after for r in eager.records][-2:] == [r.mem_after for r in fx.records][-2:]


def test_a_tensor_inside_a_node_s_nested_output_is_freed_when_the_model_lets_it_go() -> None:
    # reading nested items later must not keep the tuples' tensors alive (on CUDA, memory_allocated would
    # count them): one the model drops is freed at once, as without the profiler
    import weakref

    class Pair(nn.Module):
        def forward(self, x: torch.Tensor) -> object:
            return x * 2, (x * 3, x * 4)

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pair = Pair()
            self.freed: list[bool] = []

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = self.pair(x)
            kept, dropped = out[1][0], weakref.ref(out[1][1])
            del out
            self.freed.append(dropped() is None)
            return kept + 1

    x = torch.randn(2, 3)
    model = Model()
    model(x)
    torch_flops.TorchFLOPsByFX(model, leaf_modules=[Pair]).propagate(x)
    assert model.freed == [True, True]


def test_a_dense_vector_or_batch_times_a_sparse_matrix_counts_the_sparse_factor_s_elements() -> None:
    # a 4 x 6 sparse with 3 stored elements: each meets every row of the dense factor; a vector is one row
    # (3 MACs), a (2, 3, 4) batch six rows (18). sparse @ vector (mv): 3 MACs, and FlopCounterMode counts 0
    i = torch.tensor([[0, 1, 3], [2, 5, 0]])
    s = torch.sparse_coo_tensor(i, torch.randn(3), (4, 6), check_invariants=True)
    assert _aten(torch.matmul, torch.randn(4), s).total_macs == 3
    assert _aten(torch.matmul, torch.randn(2, 3, 4), s).total_macs == 18
    mv = _aten(torch.matmul, s, torch.randn(6))
    assert mv.total_macs == 3
    assert mv.with_convention("flop_counter").total_flops == _fcm(lambda: torch.matmul(s, torch.randn(6))) == 0


def test_sparse_products_count_stored_elements_in_every_layout_and_call() -> None:
    # A 4 x 4 with 2 blocks of 2 x 2 stored (8 values) times a dense 4 x 5: 8 x 5 = 40 MACs (BSR's _nnz()
    # counts 2 blocks); addmm/addmv take the same route as mm; a complex COO with 3 stored elements times a
    # complex 4 x 5: 15 complex MACs, 4 real each = 60; two sparse factors: per k, a's column-k elements
    # times b's row-k elements
    dense_a = torch.zeros(4, 4)
    dense_a[0:2, 2:4] = torch.randn(2, 2)
    dense_a[2:4, 0:2] = torch.randn(2, 2)
    bsr, d = dense_a.to_sparse_bsr((2, 2)), torch.randn(4, 5)
    assert _aten(torch.mm, bsr, d).total_macs == 40
    coo = torch.sparse_coo_tensor(torch.tensor([[0, 1, 3], [1, 3, 0]]), torch.randn(3), (4, 4), check_invariants=True)
    assert _aten(lambda i, s, x: torch.addmm(i, s, x), torch.zeros(4, 5), coo, d).total_macs == 15
    assert _aten(lambda i, s, v: torch.addmv(i, s, v), torch.zeros(4), coo.to_sparse_csr(), torch.randn(4)).total_macs == 3
    complex_coo = torch.sparse_coo_tensor(torch.tensor([[0, 1, 3], [1, 3, 0]]), torch.randn(3, dtype=torch.complex64), (4, 4))
    assert _aten(torch.mm, complex_coo, torch.randn(4, 5, dtype=torch.complex64)).total_macs == 60
    # a[0,1] meets b's row 1 (b[1,3]), a[1,3] row 3 (b[3,0]), a[3,0] row 0 (b[0,1]): 1 + 1 + 1 = 3
    b = torch.sparse_coo_tensor(torch.tensor([[1, 3, 0], [3, 0, 1]]), torch.randn(3), (4, 4), check_invariants=True)
    assert _aten(torch.sparse.mm, coo, b).total_macs == 3


@pytest.mark.parametrize("tracer", ["auto", "fx"])
def test_a_custom_formula_for_a_class_skips_a_subclass_that_overrides_forward(tracer: str) -> None:
    # custom_formulas={nn.Linear: f}: a subclass running its own forward (the linear, then * 2) computes
    # something else; it was kept whole (an unsupported node: the formula does not apply to it) and is
    # recorded through its ops now: F.linear by the user's formula (7) and the mul of the (2, 3) output: 6,
    # 13 in all. A subclass keeping Linear's forward is still one node counted by the formula: 7
    class Doubled(nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(x) * 2

    class Plain(nn.Linear):
        pass

    def mine(module, out, *args, **kwargs):
        return 7

    for module, expected in ((Doubled(4, 3), 7 + 6), (Plain(4, 3), 7)):
        counter = torch_flops.TorchFLOPsByFX(nn.Sequential(module), tracer=tracer,
                                             custom_formulas={nn.Linear: mine, F.linear: mine})
        with torch.no_grad():
            counter.propagate(torch.randn(2, 4))
        assert counter.total_flops == expected and not counter.profile.unsupported


@pytest.mark.parametrize("key", [nn.TransformerEncoderLayer, nn.MultiheadAttention])
def test_a_user_formula_for_a_layer_counts_it_inside_an_encoder_kept_whole(key: type) -> None:
    # in eval without gradients the encoder is one node (its fused path); with a gradient to record its
    # layers are recorded one by one. Either way a formula of the user's for the layer (1000) or for its
    # attention (1000 in place of the attention's own count) counts it: the same total in both modes (the
    # kept-whole encoder counted its layers by the package's formulas, ignoring the user's)
    torch.manual_seed(0)
    model = nn.Sequential(nn.TransformerEncoder(
        nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True), 1, enable_nested_tensor=False)).eval()
    totals = []
    for grad in (False, True):
        counter = torch_flops.TorchFLOPsByFX(model, custom_formulas={key: lambda module, out, *args, **kwargs: 1000})
        with torch.set_grad_enabled(grad):
            counter.propagate(torch.randn(2, 5, 16))
        totals.append(counter.total_flops)
    assert totals[0] == totals[1]
    if key is nn.TransformerEncoderLayer:
        assert totals == [1000, 1000]


@pytest.mark.parametrize("key", [nn.Linear, nn.MultiheadAttention])
def test_a_user_formula_for_a_layer_s_part_sees_the_call_it_counts_in_every_mode(key: type) -> None:
    # inside an encoder kept whole (eval, no gradients) a formula of the user's for a part is called as that
    # part's own call would call it: linear1 with its (2, 5, 8) input and (2, 5, 16) output (it was handed
    # the hidden tensor as its input), the attention with its (output, weights) pair and need_weights=False.
    # Linear: in x out features per row, 8 x 16 + 16 x 8 = 256 a row, 10 rows: 2560 of the totals; the same
    # totals with gradients, where the parts run one by one
    def mine(module, out, *args, **kwargs):
        if isinstance(module, nn.Linear):
            return args[0].shape[-1] * out.shape[-1] * out.shape[:-1].numel()
        return out[0].numel() + (0 if kwargs.get("need_weights", True) is False else 1)

    torch.manual_seed(0)
    model = nn.Sequential(nn.TransformerEncoder(
        nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True), 1, enable_nested_tensor=False)).eval()
    totals = []
    for grad in (False, True):
        counter = torch_flops.TorchFLOPsByFX(model, custom_formulas={key: mine})
        with torch.set_grad_enabled(grad):
            counter.propagate(torch.randn(2, 5, 8))
        totals.append(counter.total_flops)
    assert totals[0] == totals[1]


def test_a_hooked_encoder_layer_that_is_the_model_profiles_in_eval() -> None:
    # its fast path is off while it has a hook: recorded through its ops (it raised "ran without
    # nn.Module.__call__": kept whole as the root and traced through at once), its output as eager's
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).eval()
    layer.register_forward_hook(lambda module, args, out: None)
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        expected = layer(x)
        counter = torch_flops.TorchFLOPsByFX(layer)
        assert torch.equal(counter.propagate(x), expected)
    assert counter.profile.by_module()["linear1"].flops > 0
