"""ModelSnapshot (torch_flops/modelstate.py): the one definition of the model's state that the fx
guard, the export front end and the extra runs of a propagate share. Each kind of change is made
by hand on a small model and must be listed (in the model's order, under its qualified name) and
put back as it was (the same objects, compared by identity)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torch_flops.modelstate import ABSENT, ALL_KINDS, ModelSnapshot, StateKind


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    model.cache = []  # a plain container attribute
    return model


def test_each_kind_is_listed_in_the_models_order() -> None:
    model = _model()
    lin, norm = model[0], model[1]
    weight, old_norm_bias = lin.weight, norm.bias
    snapshot = ModelSnapshot(model.named_modules())
    lin.weight = nn.Parameter(torch.ones(3, 3))  # a parameter replaced
    model.register_buffer("steps", torch.zeros(()))  # a buffer registered on the root
    model.extra = nn.ReLU()  # a submodule registered on the root
    norm.calls = 1  # a plain attribute assigned
    norm.eval()  # only the BatchNorm's flag
    model.cache.append(torch.ones(1))  # a container changed in place
    norm.bias.requires_grad_(False)
    with torch.no_grad():
        norm.running_mean.add_(1)  # an in-place write: running_mean's version moves
    norm.running_var.data = torch.ones(3)  # .data rebound
    changes = [(c.kind, c.qualified_name) for c in snapshot.changes()]
    assert changes == [
        # the root's entries (buffer, submodule), then 0's, then 1's, each module in model.modules() order
        (StateKind.BUFFER, "steps"), (StateKind.SUBMODULE, "extra"),
        (StateKind.PARAMETER, "0.weight"),
        (StateKind.TRAINING, "1.training"), (StateKind.ATTRIBUTE, "1.calls"),
        (StateKind.CONTAINER, "cache"),
        # then each tensor once, in the order the modules hold them: 0.weight's old tensor is
        # still the one the snapshot watches and did not change
        (StateKind.REQUIRES_GRAD, "1.bias"), (StateKind.VERSION, "1.running_mean"), (StateKind.DATA, "1.running_var"),
    ]
    by_name = {c.qualified_name: c for c in snapshot.changes()}
    assert by_name["0.weight"].before is weight and by_name["0.weight"].now is lin.weight
    assert by_name["steps"].before is ABSENT and by_name["1.calls"].before is ABSENT
    assert by_name["1.training"].before is True and by_name["1.training"].now is False
    assert by_name["1.bias"].owner is old_norm_bias and by_name["1.bias"].now is False
    assert by_name["1.running_mean"].now == by_name["1.running_mean"].before + 1  # one write: one version


def test_restore_puts_every_kind_back() -> None:
    model = _model()
    lin, norm = model[0], model[1]
    saved_modules = list(model._modules.items())
    weight, bias, running_var = lin.weight, norm.bias, norm.running_var
    var_storage = running_var.untyped_storage()._cdata
    snapshot = ModelSnapshot(model.named_modules(), keep_data=True)
    lin.weight = nn.Parameter(torch.ones(3, 3))
    model._modules["0"] = model._modules.pop("0")  # the root's submodules in another order (no change listed)
    norm.extra = nn.ReLU()  # a submodule registered
    norm.eval()
    norm.calls = 1
    model.cache.append(1)
    bias.requires_grad_(False)
    running_var.data = torch.ones(5)
    snapshot.restore()
    assert snapshot.changes() == []
    assert list(model._modules.items()) == saved_modules  # the same modules, the same order
    assert lin.weight is weight and norm.training and "calls" not in vars(norm) and model.cache == []
    assert "extra" not in norm._modules
    assert bias.requires_grad and running_var.shape == (3,)
    assert running_var.untyped_storage()._cdata == var_storage  # the data it held, not a copy


def test_only_the_kinds_asked_for_are_recorded_and_restored() -> None:
    model = _model()
    norm = model[1]
    snapshot = ModelSnapshot(model.named_modules(), (StateKind.BUFFER, StateKind.TRAINING))
    norm.eval()
    norm.calls = 1  # an attribute: not asked for
    norm.running_mean = torch.zeros(3)  # a buffer replaced
    assert [(c.kind, c.qualified_name) for c in snapshot.changes()] == [
        (StateKind.BUFFER, "1.running_mean"), (StateKind.TRAINING, "1.training")]
    assert [c.kind for c in snapshot.changes((StateKind.TRAINING,))] == [StateKind.TRAINING]
    snapshot.restore((StateKind.TRAINING,))  # the flag alone
    assert norm.training and norm.calls == 1 and snapshot.changes() == [
        next(c for c in snapshot.changes() if c.kind is StateKind.BUFFER)]
    for change in snapshot.changes():
        change.restore()  # one entry at a time
    assert snapshot.changes() == [] and norm.calls == 1


def test_a_write_or_a_tensor_flag_is_not_restored_one_change_at_a_time() -> None:
    model = _model()
    snapshot = ModelSnapshot(model.named_modules(), ALL_KINDS)
    with torch.no_grad():
        model[0].weight.mul_(2)
    (change,) = snapshot.changes()
    assert change.kind is StateKind.VERSION and change.qualified_name == "0.weight"
    with pytest.raises(ValueError, match="a version change is put back by ModelSnapshot.restore"):
        change.restore()


def test_without_keep_data_a_rebound_data_is_seen_but_not_put_back() -> None:
    model = _model()
    snapshot = ModelSnapshot(model.named_modules(), (StateKind.DATA,))
    model[0].bias.data = torch.zeros(7)
    (change,) = snapshot.changes()
    assert change.kind is StateKind.DATA and change.before[0] == (3,) and change.now[0] == (7,)  # the shapes
    snapshot.restore()
    assert model[0].bias.shape == (7,)


def test_a_module_the_snapshot_does_not_hold() -> None:
    model = _model()
    snapshot = ModelSnapshot(model.named_modules())
    stranger = nn.ReLU()
    stranger.eval()
    assert snapshot.path(stranger) is None and snapshot.module_changes(stranger) == []
    assert snapshot.path(model[1]) == "1" and snapshot.path(model) == ""


def test_a_meta_models_rebound_data_is_seen_and_put_back() -> None:
    model = _model().to("meta")
    weight = model[0].weight
    storage = weight.untyped_storage()._cdata
    snapshot = ModelSnapshot(model.named_modules(), keep_data=True)
    weight.data = torch.empty(3, 3, device="meta")  # the same shape, dtype and device: another storage
    assert [(c.kind, c.qualified_name) for c in snapshot.changes()] == [(StateKind.DATA, "0.weight")]
    snapshot.restore()
    assert weight.untyped_storage()._cdata == storage and snapshot.changes() == []
