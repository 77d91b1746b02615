"""The program profiled is the program the user runs: data-dependent models, inputs and buffers
mutated exactly once, hooks, custom autograd Functions, models changed after the counter was made,
plain containers, signatures, TorchScript, threads, files and warnings. Each model is compared
with an eager twin: output, gradients, inputs, parameters and buffers bit for bit, and
``2 * total_macs`` with FlopCounterMode run eagerly on the same inputs."""

from __future__ import annotations

import collections
import copy
import dataclasses
import errno
import json
import os
import threading
import warnings
from typing import Any, ClassVar

import pytest
import torch
from torch import fx, nn
from torch.utils.flop_counter import FlopCounterMode

from torch_flops import NodeExecutionError, TorchFLOPsByFX, TrainingProfiler, UnsupportedOpWarning, report


def _flop_counter(model: nn.Module, *args: Any, **kwargs: Any) -> int:
    with FlopCounterMode(display=False) as mode, torch.no_grad():
        model(*args, **kwargs)
    return int(mode.get_total_flops())


# ----------------------------------------------------------------------------- data-dependent models


class EarlyExit(nn.Module):
    """Stops after the first block whose output is confident enough (an .item() branch)."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(16, 16) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = torch.tanh(block(x))
            if x.abs().mean().item() > 0.5:
                break
        return x


class NormLoop(nn.Module):
    """Halves until the norm is small: the loop count depends on the data."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.fc(x)
        while x.norm() > 1.0:
            x = x * 0.5
        return x


class Detector(nn.Module):
    """A head that runs only on the boxes whose score passes a threshold (maybe none)."""

    def __init__(self) -> None:
        super().__init__()
        self.score = nn.Linear(8, 1)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keep = self.score(x).squeeze(-1) > 0
        if not keep.any():
            return x.new_zeros(0, 4)
        return self.head(x[keep])


class PythonMoE(nn.Module):
    """Top-1 routing read back with .tolist(): each expert runs on the tokens routed to it."""

    def __init__(self) -> None:
        super().__init__()
        self.router = nn.Linear(8, 3)
        self.experts = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        choice = self.router(x).argmax(-1).tolist()
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            rows = [i for i, c in enumerate(choice) if c == e]
            if rows:
                index = torch.tensor(rows)
                out[index] = expert(x[index])
        return out


@pytest.mark.parametrize("build", [EarlyExit, NormLoop, Detector, PythonMoE], ids=lambda b: b.__name__)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_data_dependent_models_profile_as_they_run(build: Any, seed: int) -> None:
    torch.manual_seed(seed)
    model = build().eval()
    x = torch.randn(6, 16 if build is EarlyExit else 8) * (3 if build is NormLoop else 1)
    with torch.no_grad():
        expected = model(x)
        counter = TorchFLOPsByFX(model)  # "auto": the model as it runs
        out = counter.propagate(x)
    assert counter.tracer_used == "eager"
    assert torch.equal(out, expected)
    assert counter.unsupported == {}
    assert 2 * counter.total_macs == _flop_counter(model, x)  # what ran, not a graph of one path
    assert counter.total_macs > 0


def test_data_dependent_loop_count_is_the_real_one() -> None:
    torch.manual_seed(0)
    model = NormLoop().eval()
    for scale, _ in ((1.0, "few"), (100.0, "many")):
        x = torch.randn(4, 8) * scale
        with torch.no_grad():
            y, halvings = model.fc(x), 0
            while y.norm() > 1.0:
                y, halvings = y * 0.5, halvings + 1
        counter = TorchFLOPsByFX(model)
        with torch.no_grad():
            counter.propagate(x)
        muls = [r for r in counter.records if r.target == "Tensor.mul"]
        assert len(muls) == halvings  # one multiply node per iteration that ran


# ----------------------------------------------------------------------------- inputs and buffers


class MutatesInput(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        return x + 1


class CountsCalls(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1)
        return self.fc(x)


@pytest.mark.parametrize("tracer", ["auto", "fx", "export"])
def test_inputs_are_mutated_exactly_once(tracer: str) -> None:
    x = torch.ones(3)
    counter = TorchFLOPsByFX(MutatesInput(), warmup=2, repeat=3, tracer=tracer)  # type: ignore[arg-type]
    out = counter.propagate(x)
    assert torch.equal(x, torch.full((3,), 2.0))  # eager: 1 * 2, once (not 2**6)
    assert torch.equal(out, torch.full((3,), 3.0))


@pytest.mark.parametrize("tracer", ["auto", "fx", "export"])
def test_buffers_updated_once_per_propagate_and_never_at_construction(tracer: str) -> None:
    model = CountsCalls().eval()
    counter = TorchFLOPsByFX(model, warmup=2, repeat=3, tracer=tracer)  # type: ignore[arg-type]
    assert int(model.calls) == 0  # constructing the counter ran nothing
    counter.propagate(torch.randn(2, 4))
    assert int(model.calls) == 1
    counter.propagate(torch.randn(2, 4))
    assert int(model.calls) == 2


def test_training_model_state_equals_an_eager_twin(same_state: Any) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.Linear(8, 2)).train()
    twin = copy.deepcopy(model)
    x = torch.randn(16, 8)
    torch.manual_seed(1)
    out = TorchFLOPsByFX(model, warmup=1, repeat=2).propagate(x)
    torch.manual_seed(1)
    expected = twin(x)
    assert torch.equal(out, expected)  # the same dropout mask: extra runs gave the RNG state back
    same_state(model, twin)
    out.sum().backward()
    expected.sum().backward()
    for a, b in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)


def test_a_parameter_updated_in_forward_cannot_be_repeated() -> None:
    class SelfUpdating(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(3), requires_grad=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.w.add_(1)
            return x * self.w

    model = SelfUpdating()
    assert torch.equal(TorchFLOPsByFX(model).propagate(torch.ones(3)), torch.full((3,), 2.0))  # one call: fine
    with pytest.raises(ValueError, match="updates its parameter 'w' in forward.*warmup=0 and repeat=1"):
        TorchFLOPsByFX(model, repeat=2).propagate(torch.ones(3))


# ----------------------------------------------------------------------------- hooks and autograd


def test_forward_hooks_and_pre_hooks_run() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    calls: list[str] = []
    model.register_forward_hook(lambda m, a, out: out * 10)  # the root's: changes the output
    model[0].register_forward_pre_hook(lambda m, a: (calls.append("pre"), (a[0] + 1,))[1])
    model[2].register_forward_hook(lambda m, a, out: calls.append("post"))
    x = torch.randn(3, 4)
    with torch.no_grad():
        out = TorchFLOPsByFX(model).propagate(x)
        assert calls == ["pre", "post"]  # once each
        expected = model(x)
    assert torch.equal(out, expected)


class _STE(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.round()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad  # straight through: round() has no gradient of its own


class Quantized(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(_STE.apply(x * 3))


def test_custom_autograd_function_keeps_its_backward() -> None:
    torch.manual_seed(0)
    model = Quantized()
    x = torch.randn(5, 4, requires_grad=True)
    TorchFLOPsByFX(model).propagate(x).sum().backward()
    profiled = x.grad.clone()
    x.grad = None
    model(x).sum().backward()
    assert torch.equal(profiled, x.grad)  # 3 * fc.weight per row, not the 0 of round()
    assert profiled.abs().sum() > 0


# ----------------------------------------------------------------------------- changed models


@pytest.mark.parametrize("tracer", ["auto", "fx"])
def test_a_model_changed_after_construction_is_not_run_stale(tracer: str) -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.9)).eval()
    counter = TorchFLOPsByFX(model, tracer=tracer)  # type: ignore[arg-type]
    x = torch.randn(8, 4)
    assert torch.equal(counter.propagate(x), model(x))
    model.train()  # dropout now drops
    torch.manual_seed(0)
    out = counter.propagate(x)
    torch.manual_seed(0)
    assert torch.equal(out, model(x))
    model.eval().double()  # new parameter objects of another dtype
    out = counter.propagate(x.double())
    assert out.dtype == torch.float64 and torch.equal(out, model(x.double()))
    model[0] = nn.Linear(4, 6).double()  # a replaced module
    out = counter.propagate(x.double())
    assert out.shape == (8, 6) and torch.equal(out, model(x.double()))


def test_fx_outputs_come_back_in_plain_containers() -> None:
    class Dicty(nn.Module):
        def forward(self, x: torch.Tensor) -> dict[str, Any]:
            return {"a": x * 2, "b": [x + 1, x - 1]}

    for tracer in ("auto", "fx"):
        out = TorchFLOPsByFX(Dicty(), tracer=tracer).propagate(torch.ones(2))  # type: ignore[arg-type]
        assert type(out) is dict and type(out["b"]) is list
        out["c"] = 1  # writable, as the model's own output is
        out["b"].append(2)

    Out = collections.namedtuple("Out", "logits extras")

    class Nested(nn.Module):
        def forward(self, x: torch.Tensor) -> Any:
            return Out(x * 2, ([x + 1], {"d": [x]}))

    for tracer in ("auto", "fx"):
        out = TorchFLOPsByFX(Nested(), tracer=tracer).propagate(torch.ones(2))  # type: ignore[arg-type]
        assert type(out) is Out and type(out.extras[0]) is list and type(out.extras[1]) is dict
        assert type(out.extras[1]["d"]) is list
        out.extras[0].append(1)
        out.extras[1]["e"] = 2

    @dataclasses.dataclass
    class Result:
        a: torch.Tensor
        c: list[Any]

    class Fields(nn.Module):
        def forward(self, x: torch.Tensor) -> Result:
            return Result(a=x * 2, c=[x.relu(), None])

    for tracer in ("auto", "fx"):  # (fx builds the dataclass in its graph: a container, no op without a formula)
        with warnings.catch_warnings():
            warnings.simplefilter("error", UnsupportedOpWarning)
            out = TorchFLOPsByFX(Fields(), tracer=tracer).propagate(torch.ones(2))  # type: ignore[arg-type]
        assert type(out) is Result and type(out.c) is list
        out.c.append(1)


# ----------------------------------------------------------------------------- signatures


def test_varargs_kwargs_and_omitted_optional_arguments() -> None:
    class Star(nn.Module):
        def forward(self, *xs: torch.Tensor) -> torch.Tensor:
            return torch.stack(xs).sum(0)

    class Kw(nn.Module):
        def forward(self, x: torch.Tensor, **kw: torch.Tensor) -> torch.Tensor:
            return x * kw["scale"]

    class Optional(nn.Module):
        def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
            return x if mask is None else x * mask

    a, b = torch.randn(3), torch.randn(3)
    assert torch.equal(TorchFLOPsByFX(Star()).propagate(a, b, a), torch.stack([a, b, a]).sum(0))
    assert torch.equal(TorchFLOPsByFX(Kw()).propagate(a, scale=b), a * b)
    counter = TorchFLOPsByFX(Optional())
    assert torch.equal(counter.propagate(a), a)  # mask left out: its default, as in eager
    assert torch.equal(counter.propagate(a, mask=b), a * b)
    with pytest.raises(TypeError, match="got an unexpected keyword argument 'maks'"):
        counter.propagate(a, maks=b)


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_calls_eager_binds_through_a_pre_hook_or_a_wrapped_forward_are_profiled() -> None:
    """The inputs are checked against what Python binds the call to, and not where a forward
    pre-hook may change them first: a pre-hook filling in ``mask`` and dropping ``debug``, a
    ``functools.wraps`` decorator taking ``scale`` (its signature says ``(x)``)."""
    import functools

    def fill(module: nn.Module, args: Any, kwargs: dict[str, Any]) -> Any:
        kwargs.pop("debug", None)
        kwargs.setdefault("mask", torch.full((1, 2), 2.0))
        return args, kwargs

    class Masked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return self.fc(x) * mask

    def scaled(forward: Any) -> Any:
        @functools.wraps(forward)
        def wrapper(self: nn.Module, *args: Any, scale: float = 1.0, **kwargs: Any) -> Any:
            return forward(self, *args, **kwargs) * scale
        return wrapper

    class Wrapped(Masked):
        @scaled
        def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return self.fc(x) * mask

    x = torch.randn(3, 4)
    hooked = Masked()
    hooked.register_forward_pre_hook(fill, with_kwargs=True)
    counter = TorchFLOPsByFX(hooked)
    assert torch.equal(counter.propagate(x, debug=True), hooked(x, debug=True))
    assert counter.total_flops == 3 * (2 * 4 * 2 + 2) + 3 * 2  # linear: 2*3*4*2 MAC FLOPs + 6 bias adds; * mask: 6
    wrapped = Wrapped()
    ones = torch.ones(1, 2)
    assert torch.equal(TorchFLOPsByFX(wrapped).propagate(x, ones, scale=2.0), wrapped(x, ones, scale=2.0))
    with pytest.raises(TypeError, match=r"^test_calls_eager_binds.*<locals>.Masked.forward\(\) got an unexpected "
                                        r"keyword argument 'debug'$"):  # eager's words, without the hook
        TorchFLOPsByFX(Masked()).propagate(x, ones, debug=True)


def test_the_binding_check_follows_a_forward_given_new_defaults() -> None:
    class Pair(nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor | None) -> torch.Tensor:
            return x if y is None else x + y

    model, x = Pair(), torch.randn(2)
    with pytest.raises(TypeError, match=r"missing 1 required positional argument: 'y'$"):
        TorchFLOPsByFX(model).propagate(x)
    Pair.forward.__defaults__ = (None,)  # as eager now binds m(x)
    assert torch.equal(TorchFLOPsByFX(model).propagate(x), x)


    class Keyword(nn.Module):
        def forward(self, x: torch.Tensor, *, k: float) -> torch.Tensor:
            return x * k

    model = Keyword()
    with pytest.raises(TypeError, match=r"missing 1 required keyword-only argument: 'k'$"):
        TorchFLOPsByFX(model).propagate(x)
    Keyword.forward.__kwdefaults__ = {}
    Keyword.forward.__kwdefaults__["k"] = 2.0  # (set in place)
    assert torch.equal(TorchFLOPsByFX(model).propagate(x), x * 2.0)


def test_propagate_inputs_takes_a_tuple_and_a_mapping() -> None:
    model, x = nn.Linear(4, 2), torch.randn(3, 4)
    counter = TorchFLOPsByFX(model)
    assert torch.equal(counter.propagate_inputs((x,)), model(x))
    with pytest.raises(TypeError, match=r"args must be a tuple or list .* got Tensor \(one tensor x: \(x,\)\)"):
        counter.propagate_inputs(x)  # type: ignore[arg-type]  # (tuple(x) would split it into rows)
    with pytest.raises(TypeError, match="kwargs must be a mapping"):
        counter.propagate_inputs((x,), [("input", x)])  # type: ignore[arg-type]


def test_torchscript_gets_one_clear_sentence() -> None:
    scripted = torch.jit.script(nn.Linear(2, 2))
    with pytest.raises(TypeError, match="TorchScript model .* has none: profile the nn.Module before scripting"):
        TorchFLOPsByFX(scripted)


# ----------------------------------------------------------------------------- threads


def test_threads_profile_their_own_models_and_leave_torch_unpatched() -> None:
    call, getattr_ = nn.Module.__call__, nn.Module.__getattr__
    results: dict[int, Any] = {}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            torch.manual_seed(i)
            model = nn.Sequential(nn.Linear(8, 8 * (i + 1)), nn.ReLU(), nn.Linear(8 * (i + 1), 2))
            x = torch.randn(4, 8)
            for _ in range(5):
                counter = TorchFLOPsByFX(model, tracer="fx" if i % 2 else "auto")
                with torch.no_grad():
                    out = counter.propagate(x)
                    assert torch.equal(out, model(x))
            results[i] = counter.total_macs
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    def plain_calls() -> None:  # the user's own thread, calling a model while others trace with fx
        try:
            model = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
            x = torch.randn(2, 8)
            for _ in range(200):
                assert torch.equal(model(x), torch.relu(model[0](x)))
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)] + [threading.Thread(target=plain_calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    # Linear(8, 8k) + Linear(8k, 2) on 4 rows: 4*8*8k + 4*8k*2 MACs = 320 k
    assert results == {i: 320 * (i + 1) for i in range(4)}
    assert nn.Module.__call__ is call and nn.Module.__getattr__ is getattr_
    assert not fx._symbolic_trace.is_fx_tracing()
    assert not torch.nn.modules.module._global_forward_hooks  # the recording's hooks are gone


# ----------------------------------------------------------------------------- files


def test_a_failed_write_keeps_the_old_file(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    counter = TorchFLOPsByFX(nn.Linear(2, 2))
    counter.propagate(torch.randn(1, 2))
    path = tmp_path / "profile.json"
    counter.to_json(str(path))
    good = path.read_text()

    def full_disk(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    for write in (lambda: counter.to_json(str(path)), lambda: counter.save_result_to_csv(str(path)),
                  lambda: counter.export_chrome_trace(str(path))):
        with pytest.raises(OSError, match="No space left"):
            write()
        assert path.read_text() == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["profile.json"]  # no partial temporary file


def test_a_read_only_directory_is_refused_up_front(tmp_path: Any) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(PermissionError, match="not writable"):
            report.write_atomic(tmp_path / "x.csv", "a")
    finally:
        tmp_path.chmod(0o700)


def test_devices_and_pipes_are_written_into_not_replaced(tmp_path: Any) -> None:
    """Renaming a finished temporary file over ``/dev/null`` or a named pipe would replace the
    device or the pipe with a plain file (as root, ``print_model_profile(output_file=os.devnull)``
    did): they are written into where they are."""
    import stat

    report.write_atomic(os.devnull, "a report nobody keeps")
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)  # still the device
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    report.write_atomic(fifo, "résumé\n")  # UTF-8 whatever the locale, as for a file
    reader.join(timeout=10)
    assert received == ["résumé\n".encode()]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]  # no temporary file left beside it


def test_a_symbolic_link_stays_a_link_to_the_new_report(tmp_path: Any) -> None:
    (tmp_path / "reports").mkdir()
    real = tmp_path / "reports" / "latest.csv"
    real.write_text("old")
    link = tmp_path / "latest.csv"
    link.symlink_to(real)
    report.write_atomic(link, "new")
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert real.read_text() == "new" and link.read_text() == "new"
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == ["latest.csv"]  # no temporary left


def test_files_get_the_usual_permissions(tmp_path: Any) -> None:
    path = tmp_path / "out.txt"
    report.write_atomic(path, "x")
    mask = os.umask(0o022)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask


# ----------------------------------------------------------------------------- warnings


class _Mystery(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def test_one_warning_per_target_per_counter_at_the_callers_line() -> None:
    model = nn.Sequential(_Mystery(), nn.Linear(2, 2))
    counters = [TorchFLOPsByFX(model, leaf_modules=(_Mystery,)) for _ in range(3)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for counter in counters:
            counter.propagate(torch.randn(1, 2))
            counter.propagate(torch.randn(1, 2))  # the same counter again: no second warning
    ours = [w for w in caught if issubclass(w.category, UnsupportedOpWarning)]
    assert len(ours) == 3
    assert all(w.filename == __file__ for w in ours)  # points at the propagate() line above


def test_an_op_error_inside_the_model_is_the_models_own_exception() -> None:
    class Catches(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            try:
                return x @ torch.ones(5, 5)  # fails: (2, 3) @ (5, 5)
            except RuntimeError:
                return x * 2  # the model handles it, as it would eagerly

    x = torch.ones(2, 3)
    assert torch.equal(TorchFLOPsByFX(Catches()).propagate(x), x * 2)
    with pytest.raises(RuntimeError, match="cannot be multiplied") as info:  # the model's own exception
        TorchFLOPsByFX(_Raises()).propagate(x)
    assert type(info.value) is RuntimeError and not isinstance(info.value, NodeExecutionError)
    assert "'matmul' (Tensor.matmul)" in "\n".join(info.value.__notes__)


class _Raises(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ torch.ones(5, 5)


class _RaisesAfterUpdating(nn.Module):
    """Updates its BatchNorm statistics and a buffer, then raises: one eager call leaves both
    updated once, and the error as it is."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(4)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1)
        y = self.bn(x)
        raise KeyError(f"no head for {tuple(y.shape)}")


@pytest.mark.parametrize(("warmup", "repeat"), [(0, 1), (1, 1), (0, 3), (2, 2)])
def test_a_model_that_raises_leaves_what_one_eager_call_leaves(warmup: int, repeat: int) -> None:
    torch.manual_seed(0)
    twin, model = _RaisesAfterUpdating().train(), _RaisesAfterUpdating().train()
    model.load_state_dict(twin.state_dict())
    x = torch.randn(8, 4)
    with pytest.raises(KeyError, match="no head") as eager:
        twin(x)
    with pytest.raises(KeyError, match="no head") as profiled:
        TorchFLOPsByFX(model, warmup=warmup, repeat=repeat).propagate(x)
    assert type(profiled.value) is type(eager.value)
    assert float(model.calls) == float(twin.calls) == 1.0
    assert int(model.bn.num_batches_tracked) == 1
    assert torch.equal(model.bn.running_mean, twin.bn.running_mean)
    assert torch.equal(model.bn.running_var, twin.bn.running_var)


class _RebindsItsState(nn.Module):
    """Rebinds a buffer (not in place) and a Python counter on every call, and draws from a
    generator it is given: extra runs (warm-up, repeats) must leave all three as one call does."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("history", torch.zeros(1, 2))
        self.calls = 0

    def forward(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        self.history = torch.cat([self.history, x])  # a new tensor under the buffer's name
        self.calls += 1
        return x * self.calls + torch.rand(2, generator=gen)


def test_extra_runs_put_back_rebound_buffers_attributes_and_input_generators() -> None:
    x = torch.ones(1, 2)
    twin, model = _RebindsItsState(), _RebindsItsState()
    g_twin, g_model = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    eager = twin(x, g_twin)
    out = TorchFLOPsByFX(model, warmup=2, repeat=3).propagate(x, g_model)
    assert torch.equal(out, eager)
    assert model.calls == twin.calls == 1
    assert model.history.shape == twin.history.shape == (2, 2) and "history" in dict(model.named_buffers())
    assert torch.equal(torch.rand(3, generator=g_model), torch.rand(3, generator=g_twin))  # the next draws too


def test_an_iterator_input_with_extra_runs_is_refused_before_anything_runs() -> None:
    calls: list[int] = []

    class SumsIts(nn.Module):
        def forward(self, parts: Any) -> torch.Tensor:
            calls.append(1)
            return sum(parts)

    with pytest.raises(ValueError, match=r"an input is an iterator \(list_iterator\).*warmup=1"):
        TorchFLOPsByFX(SumsIts(), warmup=1).propagate(iter([torch.ones(2), torch.ones(2)]))
    assert calls == []
    out = TorchFLOPsByFX(SumsIts()).propagate(iter([torch.ones(2), torch.ones(2)]))  # one call: fine
    assert torch.equal(out, torch.full((2,), 2.0))


def test_a_strided_nested_tensor_input() -> None:
    class SumsEach(nn.Module):
        def forward(self, nt: torch.Tensor) -> torch.Tensor:
            return torch.stack([t.sum() for t in nt.unbind()])

    nt = torch.nested.nested_tensor([torch.ones(3), torch.ones(5)])
    counter = TorchFLOPsByFX(SumsEach())
    assert torch.equal(counter.propagate(nt), torch.tensor([3.0, 5.0]))
    assert counter.total_flops == 3 + 5  # Tensor.sum of n elements: n FLOPs by the table (3 and 5 above)
    assert next(r for r in counter.records if r.op == "placeholder").output_shape == ((3,), (5,))


def test_a_call_override_that_skips_module_call_is_named() -> None:
    class Bypasses(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def __call__(self, x: torch.Tensor) -> torch.Tensor:  # never reaches nn.Module.__call__
            return self.forward(x)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x)

    with pytest.raises(RuntimeError, match=r"ran without nn.Module.__call__"):
        TorchFLOPsByFX(Bypasses()).propagate(torch.ones(1, 2))


# ------------------------------------------------------------------ torch.func inside the forward
class _Ensemble(nn.Module):
    """torch.func's model-ensembling recipe: three Linear(6, 2) run at once by vmap."""

    def __init__(self) -> None:
        super().__init__()
        self.members = nn.ModuleList([nn.Linear(6, 2) for _ in range(3)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        params, buffers = torch.func.stack_module_state(list(self.members))
        base = copy.deepcopy(self.members[0]).to("meta")
        run = lambda p, b, xx: torch.func.functional_call(base, (p, b), (xx,))
        return torch.vmap(run, in_dims=(0, 0, None))(params, buffers, x)


class _PerSampleGrads(nn.Module):
    """Per-example gradients: vmap over grad of a Linear(6, 3)'s squared output."""

    def __init__(self) -> None:
        super().__init__()
        self.l = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        params = {k: v.detach() for k, v in self.l.named_parameters()}

        def loss(p: dict[str, torch.Tensor], xi: torch.Tensor) -> torch.Tensor:
            return torch.func.functional_call(self.l, p, (xi.unsqueeze(0),)).pow(2).sum()

        return torch.vmap(torch.func.grad(loss), in_dims=(None, 0))(params, x)["weight"].sum()


class _EnsembleOfBlocks(nn.Module):
    """The members' own modules called with their stacked (batched) weights on one unbatched input:
    the batch is in the weights only."""

    def __init__(self) -> None:
        super().__init__()
        self.members = nn.ModuleList([nn.Sequential(nn.Linear(6, 4), nn.ReLU(), nn.Linear(4, 2)) for _ in range(3)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        params, buffers = torch.func.stack_module_state(list(self.members))
        run = lambda p, b, xx: torch.func.functional_call(self.members[0], (p, b), (xx,))
        return torch.vmap(run, in_dims=(0, 0, None))(params, buffers, x)


@pytest.mark.parametrize(("make", "expected"), [
    (_Ensemble, 216),  # 3 members x Linear(6, 2) on 3 rows: 3 x 2 x (3 x 6 x 2) = 216 (FlopCounterMode's)
    (_EnsembleOfBlocks, 576),  # 3 members x 2 x (3x6x4 + 3x4x2 = 96 MACs) on 3 rows = 576
    (_PerSampleGrads, 360),  # 5 examples x (forward 1x6x3 + weight grad 3x1x6 MACs) x 2 = 5 x 72 = 360
])
def test_vmap_counts_every_example(make: Any, expected: int) -> None:
    torch.manual_seed(0)
    model = make()
    x = torch.randn(5 if make is _PerSampleGrads else 3, 6)
    with FlopCounterMode(display=False) as mode:
        eager = model(x)
    counter = TorchFLOPsByFX(model)
    out = counter.propagate(x)
    assert torch.equal(out, eager)
    assert mode.get_total_flops() == expected
    assert counter.profile.with_convention("flop_counter").total_flops == expected


class _ForwardAD(nn.Module):
    """A Linear(6, 6) + tanh under forward-mode AD: torch.func.jvp, jacfwd, or a dual level."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.l = nn.Linear(6, 6)
        self.kind = kind

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "jvp":
            out, tangent = torch.func.jvp(lambda t: self.l(t).tanh(), (x,), (torch.ones_like(x),))
            return out + tangent
        if self.kind == "jacfwd":
            return torch.func.jacfwd(lambda t: self.l(t).tanh().sum(-1))(x)
        import torch.autograd.forward_ad as fwAD

        with fwAD.dual_level():
            return fwAD.unpack_dual(self.l(fwAD.make_dual(x, torch.ones_like(x))).relu()).tangent


@pytest.mark.parametrize(("kind", "expected"), [
    # x (3, 6): the primal addmm, 3x6x6 = 108 MACs, and addmm's tangent, x_t @ W^T + x @ W_t^T (W's
    # tangent a zero tensor, still an mm): 2 x 108 MACs; 2 x 324 = 648
    ("jvp", 648),
    ("dual", 648),
    # jacfwd: the tangents of the 18 basis directions of x, batched by vmap: FlopCounterMode's 4320
    ("jacfwd", 4320),
])
def test_forward_mode_ad_counts_the_tangents_as_flop_counter_mode(kind: str, expected: int) -> None:
    torch.manual_seed(0)
    model, x = _ForwardAD(kind), torch.randn(3, 6)
    with torch.no_grad(), FlopCounterMode(display=False) as mode:
        eager = model(x)
    with torch.no_grad():
        counter = TorchFLOPsByFX(model)
        out = counter.propagate(x)
    assert torch.equal(out, eager)
    assert mode.get_total_flops() == counter.profile.with_convention("flop_counter").total_flops == expected
    assert not [r.target for r in counter.records if r.status.value == "unsupported"]


def test_autograd_grad_inside_the_forward_is_the_forward_s_work() -> None:
    class GradientPenalty(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = nn.Linear(6, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x.detach().requires_grad_()
            (g,) = torch.autograd.grad(self.l(x).sum(), x, create_graph=True)
            return g.pow(2).sum()

    torch.manual_seed(0)
    model = GradientPenalty()
    x = torch.randn(5, 6)
    twin = copy.deepcopy(model)
    counter = TorchFLOPsByFX(model)
    out = counter.propagate(x)
    assert torch.equal(out, twin(x))
    # forward addmm 5x6x3 = 90 MACs, and the input gradient dY (5x3) @ W (3x6) = 90 MACs: 2 x 180 = 360
    # (FlopCounterMode's own count; its module tracker cannot run autograd.grad on a leaf in 2.13)
    assert counter.profile.with_convention("flop_counter").total_flops == 360
    assert "mm" in [r.name for r in counter.records]


def test_autograd_grad_inside_the_forward_stays_forward_work_when_the_backward_is_counted() -> None:
    # with backward=True (and in a TrainingProfiler) the inner grad's ops went to the backward: forward 96, backward
    # 480 in the flop_counter convention, where FlopCounterMode counts 192 + 384
    class GP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = x * 1
            (g,) = torch.autograd.grad((self.lin(y) ** 2).sum(), y, create_graph=True)
            return (g * y).sum()

    torch.manual_seed(0)
    model, x = GP(), torch.randn(3, 4, requires_grad=True)
    with FlopCounterMode(display=False) as reference:
        out = model(x)
        forward = reference.get_total_flops()
        out.backward()
    # the Linear 3x4 @ 4x4 = 48 MACs, the inner grad's dY @ W 48 MACs: 2 x 96 = 192 forward; the backward of both
    # and of the first product's input and weight gradients: 384
    assert (forward, reference.get_total_flops()) == (192, 576)
    for backward in (False, True):
        counter = TorchFLOPsByFX(copy.deepcopy(model))
        counter.propagate(x.detach().clone().requires_grad_(), backward=backward)
        profile = counter.profile.with_convention("flop_counter")
        assert profile.total_flops == 192 and "mm" in [r.name for r in counter.records]
        if backward:
            assert profile.total_backward_flops == 384
    twin = copy.deepcopy(model)
    optimizer = torch.optim.SGD(twin.parameters(), lr=0.1)
    with TrainingProfiler(twin, optimizer) as profiler:
        twin(x).backward()
        optimizer.step()
    [step] = profiler.profiles
    assert (2 * step.total_macs, 2 * step.total_backward_macs) == (192, 384)


def test_a_vmapped_matrix_vector_product_counts_as_the_mm_it_runs() -> None:
    weight = torch.randn(6, 8)

    class Batched(nn.Module):
        def forward(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
            a = torch.vmap(lambda x: weight @ x)(xs)  # 4 x mv (6x8 @ 8): one mm of 4 x 48 MACs
            b = torch.vmap(torch.dot)(xs, ys)  # 4 x dot of 8: one bmm of 32 MACs
            c = torch.vmap(lambda x: torch.outer(x, x))(xs)  # products, no dot: a mul
            return a.sum() + b.sum() + c.sum()

    xs, ys = torch.randn(4, 8), torch.randn(4, 8)
    with FlopCounterMode(display=False) as mode:
        Batched()(xs, ys)
    counter = TorchFLOPsByFX(Batched())
    counter.propagate(xs, ys)
    # FlopCounterMode: mm 2 x 192 + bmm 2 x 32 = 448 (mv and dot alone it counts 0)
    assert mode.get_total_flops() == 448
    assert counter.profile.with_convention("flop_counter").total_flops == 448


# ------------------------------------------------------------------ fault round 31: the profiler's own calls
class _Strict(torch.Tensor):
    """A subclass allowing only the functions it implements (a common pattern): in a plain call it
    sees the model's calls only."""

    allowed = frozenset({"linear", "gelu", "__get__", "__repr__", "equal"})

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = getattr(func, "__name__", str(func))
        if name not in cls.allowed:
            raise NotImplementedError(f"_Strict does not support {name}")
        return super().__torch_function__(func, types, args, kwargs or {})


def test_the_profiler_s_own_tensor_calls_reach_no_user_function_mode_or_subclass() -> None:
    from collections import Counter

    from torch.overrides import TorchFunctionMode

    class Count(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.calls: Counter[str] = Counter()

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            self.calls[getattr(func, "__name__", str(func))] += 1
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(4, 4), nn.GELU(), nn.Linear(4, 2)), torch.randn(3, 4)
    with Count() as plain:
        model(x)
    with Count() as profiled:
        TorchFLOPsByFX(model).propagate(x)
    assert profiled.calls == plain.calls == {"linear": 2, "gelu": 1}  # (numel, untyped_storage, dim: the profiler's)
    out = TorchFLOPsByFX(model).propagate(x.as_subclass(_Strict))  # raised NotImplementedError: dim
    assert torch.equal(out, model(x.as_subclass(_Strict)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Count() as plain_step:  # an optimizer step's: the profiler's reads of the update's bytes are not the user's
        model(x).sum().backward()
        opt.step()
    from torch_flops import TrainingProfiler

    profiler = TrainingProfiler(model, opt)
    with Count() as profiled_step:
        profiler.start_profile()
        model(x).sum().backward()
        opt.step()
        profiler.stop_profile()
    profiler.end_profile()
    assert profiled_step.calls - plain_step.calls == Counter()


def test_a_strict_subclass_input_runs_under_fx_and_a_training_step_as_plain() -> None:
    # fx's per-node measuring read is_floating_point of the subclass, and the backward counter re-ran
    # autograd's ops from Python, where the subclass's __torch_function__ saw (and refused) aten.mm
    class Strict(_Strict):
        allowed = _Strict.allowed | {"as_subclass"}

    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(4, 4), nn.GELU(), nn.Linear(4, 2)), torch.randn(3, 4)
    out = TorchFLOPsByFX(model, tracer="fx").propagate(x.as_subclass(Strict))
    assert torch.equal(out, model(x.as_subclass(Strict)))
    from torch_flops import TrainingProfiler

    totals = []
    for given in (x.as_subclass(Strict), x):  # the step's counts are those of the same step on a plain tensor
        model.zero_grad(set_to_none=True)  # (no gradient to accumulate into: 30 adds more otherwise)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        profiler = TrainingProfiler(model, opt)
        profiler.start_profile()
        model(given).as_subclass(torch.Tensor).sum().backward()
        opt.step()
        profiler.stop_profile()
        [step] = profiler.profiles
        profiler.end_profile()
        totals.append((step.total_flops, step.total_backward_flops))
    assert totals[0] == totals[1] and totals[0][1] > 0


def test_warmup_s_snapshot_and_undo_reach_no_parameter_subclass() -> None:
    # the extra run's snapshot of parameters and its undo read and wrote them with torch functions on: a
    # logging parameter subclass saw __get__/__set__ calls of the profiler's between its two linears
    class Logged(nn.Parameter):
        log: ClassVar[list[str]] = []

        @classmethod
        def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            cls.log.append(getattr(func, "__name__", str(func)))
            return super().__torch_function__(func, types, args, kwargs or {})

    layer = nn.Linear(3, 2)
    layer.weight = Logged(layer.weight.detach())
    x = torch.randn(2, 3)
    Logged.log.clear()  # (setting the parameter read it once)
    TorchFLOPsByFX(nn.Sequential(layer), warmup=1).propagate(x)
    assert Logged.log == ["linear", "linear"]  # the warm-up call's and the recorded one's


def test_extra_runs_leave_attribute_tensors_and_python_and_numpy_generators_as_one_call() -> None:
    # warm-up and repeat calls: a plain tensor attribute the forward updates in place (not a buffer), and
    # Python's and numpy's global generators the forward draws from, as one plain call leaves them
    import random

    import numpy as np

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = nn.Linear(4, 4)
            self.total = torch.zeros(4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.total.add_(1.0)
            return self.l(x) * random.uniform(0.5, 1.5) * float(np.random.uniform(0.5, 1.5))

    torch.manual_seed(0)
    model, x = M(), torch.randn(2, 4)
    twin = copy.deepcopy(model)
    random.seed(3)
    np.random.seed(3)
    expected = twin(x)
    after = (random.random(), float(np.random.random()))
    random.seed(3)
    np.random.seed(3)
    out = TorchFLOPsByFX(model, warmup=1, repeat=2).propagate(x)
    assert torch.equal(out, expected) and (random.random(), float(np.random.random())) == after
    assert torch.equal(model.total, torch.ones(4))  # 1 call: was 3 (warm-up, two timed calls)


def test_a_strict_subclass_input_gets_its_warm_up_and_timed_calls() -> None:
    # the extra runs' input copy called is_inference/clone on the subclass with torch functions on: it
    # refused, and the extra runs ended silently (1 call of the model instead of 5)
    calls = []
    model = nn.Sequential(nn.Linear(4, 4))
    model.register_forward_pre_hook(lambda module, args: calls.append(type(args[0]).__name__))
    TorchFLOPsByFX(model, warmup=2, repeat=3).propagate(torch.randn(2, 4).as_subclass(_Strict))
    assert calls == ["_Strict"] * 5


def test_an_attribute_viewing_a_weight_is_no_parameter_update_for_the_extra_runs() -> None:
    # the extra runs put plain tensor attributes back by copying into them: a view of a weight written back
    # bumped the weight's version, and the run was refused as one updating its parameters in forward
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = nn.Linear(4, 4)
            self.row = self.l.weight[0]

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.l(x) + self.row

    model, x = M(), torch.randn(2, 4)
    out = TorchFLOPsByFX(model, warmup=1, repeat=2).propagate(x)
    assert torch.equal(out, model(x))


def test_extra_runs_write_back_only_what_they_changed() -> None:
    # a read-only cached mask and an expanded position table, saved by an earlier call's graph: written back
    # unchanged, their version moved on (the caller's backward failed) and the expanded one raised
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = nn.Linear(4, 4)
            self.mask = torch.ones(2, 4)
            self.pos = torch.arange(4.0).expand(2, -1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.l(x) * self.mask + self.pos

    model, x = M(), torch.randn(2, 4, requires_grad=True)
    earlier = model(x)  # saves self.mask for its backward
    versions = (model.mask._version, model.pos._version)
    out = TorchFLOPsByFX(model, warmup=1, repeat=2).propagate(x)
    assert (model.mask._version, model.pos._version) == versions
    (earlier.sum() + out.sum()).backward()  # raised: a variable needed for gradient computation was modified


def test_a_subclass_input_carrying_data_keeps_it_in_the_extra_runs() -> None:
    # the copy for the extra runs was made with torch functions off and re-classed: the subclass's own data
    # (a tag its ops carry on) was lost, the extra calls failed and ended silently
    class Tagged(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = super().__torch_function__(func, types, args, kwargs or {})
            if isinstance(out, Tagged):
                out.tag = next(a.tag for a in args if isinstance(a, Tagged))
            return out

    calls: list[str] = []
    model = nn.Sequential(nn.Linear(4, 4))
    model.register_forward_pre_hook(lambda module, args: calls.append(args[0].tag))
    x = torch.randn(2, 4).as_subclass(Tagged)
    x.tag = "a"
    TorchFLOPsByFX(model, warmup=1, repeat=2).propagate(x)
    assert calls == ["a", "a", "a"]


def test_extra_runs_keep_versions_nan_sparse_buffers_and_subclass_data_as_one_call() -> None:
    # a train-mode BatchNorm's statistics (its kernel changes them without moving their version), a NaN
    # buffer (never equal to itself) and a sparse one (torch.equal refuses it): written back, their version
    # moved and a graph the caller holds failed its backward; a subclass whose __torch_function__ is off
    # and one carrying an attribute lost their class/data in the extra calls (which then ended silently)
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn = nn.BatchNorm1d(4)
            self.register_buffer("nan", torch.tensor([float("nan"), 1.0, 1.0, 1.0]))
            self.register_buffer("sp", torch.eye(4).to_sparse())

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.bn(x) * self.nan.nan_to_num() + torch.sparse.mm(self.sp, x.t()).t()

    torch.manual_seed(0)
    model, x = M(), torch.randn(3, 4, requires_grad=True)
    held = model(x).sum()
    twin = copy.deepcopy(model)
    twin(x)
    TorchFLOPsByFX(model, warmup=1, repeat=2).propagate(x)
    held.backward()  # raised: a variable needed for gradient computation has been modified
    assert torch.equal(model.bn.running_mean, twin.bn.running_mean)

    class Scaled(torch.Tensor):
        __torch_function__ = torch._C._disabled_torch_function_impl

    calls: list[tuple[str, Any]] = []
    layer = nn.Sequential(nn.Linear(4, 4))
    layer.register_forward_pre_hook(lambda module, args: calls.append((type(args[0]).__name__,
                                                                        getattr(args[0], "scale", None))))
    for cls in (Scaled, torch.Tensor):
        given = torch.randn(2, 4).as_subclass(cls) if cls is Scaled else torch.randn(2, 4)
        given.scale = 2
        TorchFLOPsByFX(layer, warmup=1, repeat=2).propagate(given)
    assert calls == [("Scaled", 2)] * 3 + [("Tensor", 2)] * 3


# ----------------------------------------------------------------------------- what the extra runs put back


class _ChangesItsStructure(nn.Module):
    """A forward that switches itself to eval, flips a parameter's requires_grad, deletes a child
    the first time, adds one, registers a parameter and appends to a plain list."""

    def __init__(self) -> None:
        super().__init__()
        self.aux = nn.Linear(4, 4)
        self.out = nn.Linear(4, 2)
        self.seen: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if hasattr(self, "aux"):
            x = self.aux(x)
            del self.aux
        if not hasattr(self, "extra"):
            self.extra = nn.Linear(4, 4)  # (its weights drawn from the global generator)
        if "scale" not in self._parameters:
            self.register_parameter("scale", nn.Parameter(torch.rand(1)))
        self.out.weight.requires_grad_(not self.out.weight.requires_grad)
        self.seen.append(len(self.seen))
        self.eval()
        return self.out(self.extra(x)) * self.scale


@pytest.mark.parametrize(("warmup", "repeat"), [(0, 1), (1, 1), (0, 2), (2, 3)])
def test_extra_runs_put_back_structure_flags_and_containers(warmup: int, repeat: int) -> None:
    torch.manual_seed(0)
    model = _ChangesItsStructure().train()
    x = torch.randn(3, 4)
    twin = copy.deepcopy(model)
    torch.manual_seed(1)
    expected = twin(x)
    rng = torch.get_rng_state()
    torch.manual_seed(1)
    out = TorchFLOPsByFX(model, warmup=warmup, repeat=repeat).propagate(x)
    assert torch.equal(out, expected)  # the real call took the first call's branch, drew the same weights
    assert torch.equal(torch.get_rng_state(), rng)
    assert not hasattr(model, "aux") and isinstance(model.extra, nn.Linear)
    assert torch.equal(model.extra.weight, twin.extra.weight) and torch.equal(model.scale, twin.scale)
    assert model.seen == twin.seen == [0]
    assert model.out.weight.requires_grad is twin.out.weight.requires_grad is False
    # the forward's own self.eval() stays, as after the eager call (it was undone after every call)
    assert [m.training for m in model.modules()] == [m.training for m in twin.modules()] == [False, False, False]


@pytest.mark.parametrize("how", ["data.add_", "data ="])
def test_a_parameter_written_through_data_in_forward(how: str) -> None:
    class WritesData(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if how == "data.add_":
                self.lin.weight.data.add_(1.0)  # (moves no version counter)
            else:
                self.lin.weight.data = self.lin.weight.data + 1.0
            return self.lin(x)

    torch.manual_seed(0)
    model, x = WritesData(), torch.randn(2, 4)
    before = model.lin.weight.detach().clone()
    if how == "data.add_":  # cannot be undone without a copy of every weight: said (a clamp would be harmless)
        with pytest.warns(UserWarning, match="writes its parameter 'lin.weight' through .data.*warmup=0 and repeat=1"):
            TorchFLOPsByFX(model, warmup=1).propagate(x)
        assert torch.equal(model.lin.weight, before + 2.0)  # the warm-up's and the real call's
    else:  # a rebound .data is put back (its old data held): one call's +1
        TorchFLOPsByFX(model, warmup=1, repeat=2).propagate(x)
        assert torch.equal(model.lin.weight, before + 1.0)


def test_a_torchscript_submodule_with_extra_runs() -> None:
    class WithScript(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.jit.script(nn.Sequential(nn.Linear(8, 8), nn.ReLU()))
            self.b = nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(self.a(x))

    torch.manual_seed(0)
    model, x = WithScript(), torch.randn(3, 8)
    expected = model(x)
    with FlopCounterMode(display=False) as reference:
        model(x)
    counter = TorchFLOPsByFX(model, warmup=1, repeat=2)
    assert torch.equal(counter.propagate(x), expected)
    # the scripted part counted through its aten ops: 2*3*8*8 + 2*3*8*4 = 576
    assert counter.profile.with_convention("flop_counter").total_flops == reference.get_total_flops() == 576


# ----------------------------------------------------------------------------- where a report is written


def test_a_pipe_behind_a_link_is_written_into(tmp_path: Any) -> None:
    # /dev/stdout piped into another program: a link (/proc/self/fd/1) to a pipe, whose resolved name
    # ("pipe:[N]") is no path; the pipe is written into, as /dev/null is
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "stdout"
    link.symlink_to(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    report.write_atomic(link, "through the link\n")
    reader.join(timeout=10)
    assert received == [b"through the link\n"] and link.is_symlink()
    # appending CSV rows to a pipe reads nothing back from it (it would wait for a writer forever)
    counter = TorchFLOPsByFX(nn.Linear(4, 3))
    counter.propagate(torch.randn(2, 4))
    done = threading.Event()
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    writer = threading.Thread(target=lambda: (counter.save_result_to_csv(str(link), mode="a"), done.set()),
                              daemon=True)
    reader.start()
    writer.start()
    if not done.wait(timeout=20):  # both ends reading: let them go before failing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("appending to a pipe read it back and waited for a writer")
    reader.join(timeout=10)
    assert received[1].startswith(b"node,op,target,")


@pytest.mark.parametrize("kind", ["dangling link", "trailing slash", "link loop"])
def test_a_path_that_cannot_be_a_file_is_refused_before_writing(tmp_path: Any, kind: str) -> None:
    if kind == "dangling link":
        path = tmp_path / "report.json"
        path.symlink_to(tmp_path / "missing" / "report.json")
        match = "no such directory"
    elif kind == "trailing slash":
        path = f"{tmp_path / 'report.json'}/"
        match = "names a directory"
    else:
        (tmp_path / "a.json").symlink_to(tmp_path / "b.json")
        (tmp_path / "b.json").symlink_to(tmp_path / "a.json")
        path = tmp_path / "a.json"
        match = "symbolic links form a loop"
    with pytest.raises(OSError, match=match):
        report.check_writable(path)  # (what the command line and get_model_profile check before running)
    with pytest.raises(OSError, match=match):
        report.write_atomic(path, "{}")
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    if kind == "link loop":
        assert (tmp_path / "a.json").is_symlink()  # left as it was, not replaced by a file


def test_appending_rows_of_other_columns_is_refused(tmp_path: Any) -> None:
    path = tmp_path / "rows.csv"
    forward = TorchFLOPsByFX(nn.Linear(4, 3))
    forward.propagate(torch.randn(2, 4))
    forward.save_result_to_csv(path)
    forward.save_result_to_csv(path, mode="a")  # the same columns: appended without a header
    lines = path.read_text().splitlines()
    assert sum(line.startswith("node,") for line in lines) == 1 and len(lines) == 1 + 2 * 5
    with_backward = TorchFLOPsByFX(nn.Linear(4, 3))
    with_backward.propagate(torch.randn(2, 4), loss_fn=lambda out: out.sum())
    with pytest.raises(ValueError, match="its header has 17 columns.*these rows 26"):
        with_backward.save_result_to_csv(path, mode="a")
    assert path.read_text().splitlines() == lines  # left as it was


def test_a_timer_reading_no_time_leaves_the_node_untimed() -> None:
    class Broken:
        def tick(self) -> int:
            return 0

        def finish(self) -> None:
            pass

        def elapsed_ms(self, start: Any, end: Any) -> float:
            return float("nan")

    counter = TorchFLOPsByFX(nn.Linear(4, 3), timer=Broken())
    counter.propagate(torch.randn(2, 4))
    assert all(r.time_ms is None for r in counter.records)
    json.loads(counter.to_json(), parse_constant=lambda name: pytest.fail(f"{name} in the JSON"))


def test_a_stream_redirected_to_a_file_is_appended_to(tmp_path: Any) -> None:
    # /dev/stdout under `>> run.log`: /proc/self/fd/1 is the log file itself; written through the
    # descriptor, the lines before stay (it was replaced by the report alone)
    log = tmp_path / "run.log"
    log.write_text("earlier line\n")
    with open(log, "a") as stream:
        report.write_atomic(f"/dev/fd/{stream.fileno()}", "REPORT\n")
        stream.write("later line\n")
    assert log.read_text() == "earlier line\nREPORT\nlater line\n"
    with pytest.raises(FileNotFoundError, match="no such directory 'nosuchdir/..'"):  # ('..' of nothing)
        report.check_writable("nosuchdir/../out.json")


def test_a_timer_of_numbers_of_other_kinds_is_read() -> None:
    import numpy as np

    for kind in (np.float32, torch.tensor):
        class Timer:
            def tick(self) -> int:
                return 0

            def finish(self) -> None:
                pass

            def elapsed_ms(self, start: Any, end: Any, kind: Any = kind) -> Any:
                return kind(0.25)

        counter = TorchFLOPsByFX(nn.Linear(4, 3), timer=Timer())
        counter.propagate(torch.randn(2, 4))
        assert counter.profile.total_time_ms == 0.25  # one node timed: the linear


def test_a_pre_hooks_work_on_a_module_kept_whole_is_counted() -> None:
    class Pre(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l, self.k = nn.Linear(8, 8), nn.Linear(8, 8)
            self.l.register_forward_pre_hook(lambda m, a: (a[0] @ self.k.weight,))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.k(self.l(x))

    torch.manual_seed(0)
    model, x = Pre(), torch.randn(2, 8)
    with FlopCounterMode(display=False) as reference:
        expected = model(x)
    counter = TorchFLOPsByFX(model)
    assert torch.equal(counter.propagate(x), expected)
    # the hook's (2, 8) @ (8, 8): 2*2*8*8 = 256 FLOPs, then each linear's 256 (+ 16 bias adds)
    assert counter.profile.with_convention("flop_counter").total_flops == reference.get_total_flops() == 768
    assert counter.profile.by_module()["l"].flops == 256 + 272
    # a module the user asked to keep whole stays one node, hooks or not: their formula counts it
    asked = TorchFLOPsByFX(model, custom_formulas={nn.Linear: lambda module, out, x: (1000, 400)})
    asked.propagate(x)
    assert [r.target for r in asked.records if r.op == "call_module"] == ["Linear", "Linear"]
    assert asked.profile.by_module()["l"].flops == 1000

    class Block(nn.Module):  # a formula of the user's found through a base class, registered by name
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x)

    class SubBlock(Block):
        pass

    from torch_flops import MODULE_FLOPs_MAPPING

    hooked = nn.Sequential(SubBlock())
    hooked[0].register_forward_pre_hook(lambda module, args: None)
    MODULE_FLOPs_MAPPING["Block"] = lambda module, out, x: 1000
    try:
        named = TorchFLOPsByFX(hooked)
        named.propagate(x)
    finally:
        del MODULE_FLOPs_MAPPING["Block"]
    assert named.profile.total_flops == 1000


def test_a_data_write_warning_names_the_users_line() -> None:
    class Clamps(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.lin.weight.data.clamp_(-0.01, 0.01)
            return self.lin(x)

    torch.manual_seed(0)
    with pytest.warns(UserWarning, match="through .data") as caught:
        TorchFLOPsByFX(Clamps(), warmup=1).propagate(torch.randn(2, 4))
    assert [w.filename for w in caught if "through .data" in str(w.message)] == [__file__]


def test_every_spelling_of_a_stream_is_written_through_its_descriptor(tmp_path: Any) -> None:
    log = tmp_path / "run.log"
    log.write_text("earlier line\n")
    with open(log, "a") as stream:
        n = stream.fileno()
        for path in (f"/proc/{os.getpid()}/fd/{n}", f"/proc/thread-self/fd/{n}", f"/dev//fd/{n}", f"//dev/fd/{n}"):
            report.write_atomic(path, f"{path}\n")
        # rows appended onto a stream redirected to a file already holding lines: no second header
        counter = TorchFLOPsByFX(nn.Linear(4, 3))
        counter.propagate(torch.randn(2, 4))
        counter.save_result_to_csv(f"/dev/fd/{n}", mode="a")
    lines = log.read_text().splitlines()
    assert lines[:5] == ["earlier line", f"/proc/{os.getpid()}/fd/{n}", f"/proc/thread-self/fd/{n}",
                         f"/dev//fd/{n}", f"//dev/fd/{n}"]
    assert not any(line.startswith("node,") for line in lines) and len(lines) == 5 + 5  # the 5 node rows
    with open(log) as read_only, pytest.raises(PermissionError, match="not writable"):
        report.check_writable(f"/dev/fd/{read_only.fileno()}")  # (before a run, not after it)
