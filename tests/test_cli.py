"""Tests for ``torch_flops.cli``: ``torch-flops`` / ``python -m torch_flops`` as a subprocess on zoo
models, on an import path and on a bad argument; the other options in-process through ``main``."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from torch_flops import Profile, zoo
from torch_flops.cli import main

TINY_MODULE = '''
from torch import nn


def build():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


model = build()
not_a_model = 3
'''


def _command() -> list[str]:
    """The installed console script when there is one, else ``python -m torch_flops``."""
    script = shutil.which("torch-flops", path=os.path.dirname(sys.executable))
    return [script] if script else [sys.executable, "-m", "torch_flops"]


# The subprocess runs, started together (each spends seconds importing torch) and awaited by the tests.
_RUNS: dict[str, tuple[list[str], bool]] = {  # name -> (arguments, run in the import-path directory)
    "resnet50": (["-m", "torch_flops", "resnet50", "--input-shape", "1,3,64,64", "--depth", "1", "--warmup", "0"],
                 False),
    "gpt2": (["gpt2", "--meta", "--tokens", "1,32", "--format", "json"], False),
    "import_path": (["-m", "torch_flops", "tinynet_cli:build", "--input-shape", "2,8", "--format", "csv",
                     "--group-by", "module"], True),
    "bad_argument": (["-m", "torch_flops", "resnet50", "--input-shape", "1,a"], False),
    # the polish of issue 9, each as a new user would meet it
    "piped": (["-m", "torch_flops", "unet", "--input-shape", "1,3,16,16", "--format", "table"], False),
    "export_all_nodes": (["-m", "torch_flops", "unet", "--input-shape", "1,3,16,16", "--format", "table",
                          "--tracer", "export", "--all-nodes", "--quiet"], False),
    "no_such_file": (["-m", "torch_flops", "./no/such/model.py"], False),
    "empty_shape": (["-m", "torch_flops", "unet", "--input-shape", ""], False),
    "bad_output": (["-m", "torch_flops", "unet", "--output", "/no/such/dir/out.json"], False),
    "too_many_tokens": (["-m", "torch_flops", "gpt2", "--meta", "--tokens", "1,2048"], False),
    "cuda": (["-m", "torch_flops", "unet", "--device", "cuda"], False),
    "no_architectures": (["-m", "torch_flops", "config.json", "--meta", "--tokens", "1,8", "--format", "json"], True),
}
# a transformers config without "architectures" (AutoConfig reads its model_type)
BERT_CONFIG = ('{"model_type": "bert", "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4, '
               '"intermediate_size": 64, "vocab_size": 100}')


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, subprocess.Popen[str]]]:
    directory = tmp_path_factory.mktemp("import_path")
    (directory / "tinynet_cli.py").write_text(TINY_MODULE)
    (directory / "config.json").write_text(BERT_CONFIG)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    started = {}
    for name, (args, in_directory) in _RUNS.items():
        command = [sys.executable, *args] if args[0] == "-m" else [*_command(), *args]
        started[name] = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                         cwd=directory if in_directory else None, env=env)
    yield started
    for process in started.values():
        if process.poll() is None:
            process.kill()
            process.wait()


def finished(runs: dict[str, subprocess.Popen[str]], name: str) -> tuple[int, str, str]:
    out, err = runs[name].communicate(timeout=300)
    return runs[name].returncode, out, err


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def tiny_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "tinynet_cli.py").write_text(TINY_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


# ---------------------------------------------------------------------- as a subprocess
def test_subprocess_resnet50_tree(runs: dict[str, subprocess.Popen[str]]) -> None:
    code, out, err = finished(runs, "resnet50")
    assert code == 0, err
    assert out.startswith("torch_flops profile\n")
    assert "Params:      25.6 M" in out and "Device:      cpu" in out and "Tracer:      eager" in out
    assert "  layer4 (Sequential)" in out and "    0 (Bottleneck)" not in out  # --depth 1
    assert "Top 3 modules at depth 1:" in out


def test_subprocess_gpt2_meta_json(runs: dict[str, subprocess.Popen[str]]) -> None:
    code, out, err = finished(runs, "gpt2")  # through the console script when installed
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "torch_flops.profile" and doc["version"] == 5
    summary = doc["summary"]
    assert summary["device"] == "meta" and summary["time_ms"] is None and summary["batch_size"] == 1
    assert summary["params"] == 124_439_808  # GPT-2 small, tied head
    assert summary["unsupported_nodes"] == 0
    p = Profile.from_json(doc)
    assert p.by_module()[""].flops == summary["flops"] > 0


def test_subprocess_import_path(runs: dict[str, subprocess.Popen[str]]) -> None:
    code, out, err = finished(runs, "import_path")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    by_path = {r["module"]: r for r in rows}
    # Linear 8->16 on 2 rows: 256 MACs; Linear 16->4: 128 MACs
    assert by_path[""]["macs"] == str(256 + 128)
    assert by_path[""]["params"] == str(8 * 16 + 16 + 16 * 4 + 4)
    assert by_path["0"]["module_type"] == "Linear"


def test_subprocess_bad_argument(runs: dict[str, subprocess.Popen[str]]) -> None:
    code, out, err = finished(runs, "bad_argument")
    assert code == 2
    assert out == ""
    assert err.strip().splitlines() == [
        "torch-flops: error: bad --input-shape '1,a': expected comma-separated positive integers like 1,3,224,224"
    ]


# ---------------------------------------------------------------------- in-process: errors
@pytest.mark.parametrize(("args", "code", "message"), [
    (["resnet5"], 1, "unknown model 'resnet5' (did you mean resnet50?)"),
    ([], 2, "MODEL is required"),
    (["resnet50", "--tokens", "1,16"], 2, "--tokens is for token models"),
    (["gpt2", "--input-shape", "1,16"], 2, "gpt2 takes token ids: use --tokens"),
    (["gpt2", "--tokens", "1,2,3"], 2, "bad --tokens '1,2,3': expected 2 comma-separated"),
    (["gpt2", "--tokens", "0,8"], 2, "bad --tokens"),
    (["unet", "--meta", "--device", "cpu"], 2, "--meta and --device are exclusive"),
    (["unet", "--device", "nonsense"], 2, "bad --device 'nonsense'"),
    (["unet", "--format", "xml"], 2, "argument --format: invalid choice"),
    (["unet", "--input-shape", "1,3,8,8", "--tokens", "1,8"], 2, "not allowed with argument"),
    (["unet", "--repeat", "0"], 2, "--repeat must be >= 1"),
    (["unet", "--meta", "--chrome-trace", "t.json"], 2, "a chrome trace needs measured times"),
    (["unet", "--input-shape", ""], 2, "bad --input-shape ''"),
    (["unet", "--input-shape", "99999999999999999999,8"], 2, "a size must be below 2^63"),
    (["unet", "--output", "/no/such/dir/out.json"], 2, "--output: cannot write '/no/such/dir/out.json': no such directory"),
    (["unet", "--chrome-trace", "."], 2, "--chrome-trace: cannot write '.': it is a directory"),
    (["./no/such/model.py"], 1, "no such file: ./no/such/model.py"),
    (["gpt2", "--meta", "--tokens", "1,2048"], 2, "takes at most 1024 (n_positions = 1024)"),
    (["gpt2", "--meta", "--generate", "2", "--sweep", "prompt=1024", "--hardware", "h100-sxm"], 2,
     "--sweep prompt=1024 with generated=2 reaches 1026 tokens per sequence, and GPT2 takes at most 1024"),
    (["gpt2", "--meta", "--generate", "2", "--sweep", "batch=1,,2", "--hardware", "h100-sxm"], 2,
     "bad --sweep batch '1,,2': expected comma-separated positive integers like 1,8,64"),
    (["gpt2", "--meta", "--generate", "2", "--sweep", "batch=1,2", "--hardware", "h100-sxm", "--depth", "3"], 2,
     "--depth does not apply to --sweep"),
    (["unet", "--compiled", "--loss", "mse"], 2, "--loss does not apply to it"),
    (["unet", "--compiled", "--optimizer", "adam"], 2, "--optimizer does not apply to it"),
    (["unet", "--compiled", "--top", "5"], 2, "--top does not apply to it"),
    (["unet", "--meta", "--format", "json", "--hardware", "h100-sxm", "--roofline", "--top", "5"], 2,
     "--top lists the top modules of --format tree and table, not --format json"),
    (["unet", "--model-class", "BertModel"], 2, "--model-class is for a transformers config.json"),
    (["no_such_module_xyz:build", "--input-shape", "1,8"], 1, "cannot import 'no_such_module_xyz'"),
    (["tinynet_cli:missing", "--input-shape", "1,8"], 1, "has no attribute 'missing'"),
    (["tinynet_cli:not_a_model", "--input-shape", "1,8"], 1, "is a int: expected a model factory"),
    (["tinynet_cli:build"], 2, "needs its input: give --input-shape"),
    (["tinynet_cli:build", "--input-shape", "2,5"], 1, "RuntimeError: mat1 and mat2 shapes cannot be multiplied"),
    (["tinynet_cli:build", "--input-shape", "2,5"], 1, "(running node '0' (Linear in module '0') failed with inputs"),
])
def test_errors_are_one_line(capsys: pytest.CaptureFixture[str], tiny_module: Path, args: list[str], code: int,
                             message: str) -> None:
    got, out, err = run_main(capsys, *args)
    assert got == code
    assert out == ""
    err_lines = [line for line in err.splitlines() if not line.startswith("torch-flops: warning:")]
    assert len(err_lines) == 1 and err_lines[0].startswith("torch-flops: error: "), err
    assert message in err_lines[0]
    assert "Traceback" not in err


def test_missing_transformers_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.json"
    config.write_text("{}")
    monkeypatch.setitem(sys.modules, "transformers", None)
    code, out, err = run_main(capsys, str(config), "--meta")
    assert code == 1 and out == ""
    assert err.strip() == "torch-flops: error: a config.json model needs transformers: pip install transformers"
    code, _, err = run_main(capsys, str(tmp_path / "nope.json"))
    assert code == 1 and "no such file" in err


# ---------------------------------------------------------------------- in-process: outputs
def test_list(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(capsys, "--list")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == sorted(zoo.ZOO)
    assert "ResNet-50" in out


def test_help_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(capsys, "--help")
    assert code == 0 and "--input-shape" in out and "--tokens" in out and "--tracer" in out
    code, out, _ = run_main(capsys, "--version")
    assert code == 0 and out.startswith("torch-flops ")


def test_formats_and_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    base = ["unet", "--input-shape", "1,3,16,16", "--warmup", "0"]
    code, out, _ = run_main(capsys, *base, "--format", "table", "--group-by", "operator", "--top", "2",
                            "--depth", "1")
    assert code == 0
    assert out.startswith("torch_flops profile\n") and "\nConv2d " in out and "Top 2 modules at depth 1:" in out

    md, trace = tmp_path / "unet.md", tmp_path / "trace.json"
    code, out, _ = run_main(capsys, *base, "--format", "markdown", "--group-by", "module", "--output", str(md),
                            "--chrome-trace", str(trace))
    assert code == 0 and out == ""
    text = md.read_text()
    assert text.startswith("**torch_flops profile**") and "| down.0.block.0 " in text
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X" and e["cat"] == "node"]
    assert len(events) > 40 and all(e["dur"] >= 0 for e in events)

    code, out, _ = run_main(capsys, *base, "--format", "csv")
    rows = list(csv.reader(io.StringIO(out)))
    assert code == 0 and rows[0][:3] == ["node", "op", "target"]

    code, out, _ = run_main(capsys, "unet", "--input-shape", "1,3,16,16", "--meta", "--format", "json", "--tracer", "fx",
                            "--dtype", "float16")  # no --warmup: --meta times nothing
    doc = json.loads(out)
    assert code == 0 and doc["summary"]["device"] == "meta" and doc["summary"]["tracer"] == "fx"
    assert doc["settings"]["tracer"] == "fx"


def test_import_path_object_and_tokens(capsys: pytest.CaptureFixture[str], tiny_module: Path) -> None:
    code, out, _ = run_main(capsys, "tinynet_cli:model", "--input-shape", "3,8", "--format", "json")
    assert code == 0
    assert json.loads(out)["summary"]["macs"] == 3 * (8 * 16 + 16 * 4)
    (tiny_module / "tinyemb_cli.py").write_text(
        "from torch import nn\n\ndef build():\n    return nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 2))\n")
    code, out, _ = run_main(capsys, "tinyemb_cli:build", "--tokens", "2,5", "--meta", "--format", "json")
    assert code == 0
    assert json.loads(out)["summary"]["macs"] == 2 * 5 * 4 * 2


def test_transformers_config(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=100, n_positions=32,
                                     bos_token_id=0, eos_token_id=0, architectures=["GPT2LMHeadModel"])
    config.save_pretrained(tmp_path)
    code, out, err = run_main(capsys, str(tmp_path / "config.json"), "--meta", "--tokens", "1,8", "--format", "json")
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    assert doc["modules"][""]["module_type"] == "GPT2LMHeadModel"
    assert doc["summary"]["macs"] > 0 and doc["summary"]["device"] == "meta"


# ---------------------------------------------------------------------- polish found as a new user
@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_device_without_a_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(capsys, "unet", "--device", "cuda")
    assert code == 2 and out == "" and "there is no CUDA device here" in err


def test_convention_all_nodes_top_at_depth_0_and_settings(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["unet", "--input-shape", "1,3,16,16", "--quiet"]
    code, out, _ = run_main(capsys, *base, "--format", "json", "--convention", "macs")
    doc = json.loads(out)
    assert code == 0 and doc["summary"]["convention"] == "macs" and doc["summary"]["flops"] == doc["summary"]["macs"]
    assert doc["settings"]["memory_source"] == "live_tensors"  # the source used on CPU, not mem_func_name
    code, out, _ = run_main(capsys, *base, "--depth", "0", "--top", "2")
    assert code == 0 and "Top 2 modules at depth 1:" in out and "(root)" not in out.split("Top 2")[1]
    code, out, _ = run_main(capsys, *base, "--format", "table", "--tracer", "export")
    assert code == 0 and "get_attr" not in out and "_guards_fn" not in out and " counted " in out
    code, out, _ = run_main(capsys, *base, "--format", "table", "--tracer", "export", "--all-nodes")
    assert code == 0 and "_guards_fn" in out and "down.0.block.0.weight" in out


def test_meta_moves_an_instance_and_config_without_architectures(capsys: pytest.CaptureFixture[str],
                                                                 tiny_module: Path) -> None:
    code, out, err = run_main(capsys, "tinynet_cli:model", "--meta", "--input-shape", "3,8", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["summary"]["device"] == "meta"
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
                                     vocab_size=100)
    config.save_pretrained(tiny_module)
    code, out, err = run_main(capsys, str(tiny_module / "config.json"), "--meta", "--tokens", "1,8", "--format",
                              "json")
    assert code == 0 and "names no architectures: built BertModel; pick another class with --model-class" in err
    code, out, err = run_main(capsys, str(tiny_module / "config.json"), "--meta", "--tokens", "1,8", "--format",
                              "json", "--model-class", "BertForMaskedLM")
    assert code == 0, err
    assert json.loads(out)["modules"][""]["module_type"] == "BertForMaskedLM"


def test_closed_stdout_is_not_a_traceback() -> None:
    process = subprocess.Popen([sys.executable, "-m", "torch_flops", "unet", "--input-shape", "1,3,16,16",
                                "--format", "table"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert process.stdout is not None and process.stderr is not None
    first = process.stdout.readline()
    process.stdout.close()  # as `| head -1` does
    err = process.stderr.read()
    assert process.wait(timeout=300) == 0
    assert first.startswith("torch_flops profile") and "Traceback" not in err and "BrokenPipe" not in err


# ---------------------------------------------------------------------- issue 9's polish, as subprocesses
def test_subprocess_piped_output_is_clean(runs: dict[str, subprocess.Popen[str]]) -> None:
    code, out, err = finished(runs, "piped")
    assert code == 0, err
    assert err == ""  # stderr is a pipe: no progress line; numpy is a dependency: no NumPy warning
    node_table = out.split("\n\n")[1]
    header = node_table.splitlines()[0].split()
    assert header[:4] == ["node", "target", "module", "status"] and "before" in header
    assert " counted " in node_table and "get_attr" not in node_table


def test_subprocess_export_all_nodes(runs: dict[str, subprocess.Popen[str]]) -> None:
    code, out, err = finished(runs, "export_all_nodes")
    assert code == 0, err
    assert "_guards_fn" in out and "down.0.block.0.weight" in out


@pytest.mark.parametrize(("name", "code", "message"), [
    ("no_such_file", 1, "no such file: ./no/such/model.py"),
    ("empty_shape", 2, "bad --input-shape '': expected comma-separated positive integers like 1,3,224,224"),
    ("bad_output", 2, "--output: cannot write '/no/such/dir/out.json': no such directory '/no/such/dir'"),
    ("too_many_tokens", 2, "--tokens asks for 2048 tokens but GPT2 takes at most 1024 (n_positions = 1024)"),
])
def test_subprocess_errors(runs: dict[str, subprocess.Popen[str]], name: str, code: int, message: str) -> None:
    got, out, err = finished(runs, name)
    assert got == code and out == ""
    assert err.strip() == f"torch-flops: error: {message}"


def test_subprocess_cuda_without_a_gpu(runs: dict[str, subprocess.Popen[str]]) -> None:
    code, _, err = finished(runs, "cuda")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    assert code == 2 and "--device cuda: there is no CUDA device here" in err


def test_subprocess_config_without_architectures(runs: dict[str, subprocess.Popen[str]]) -> None:
    pytest.importorskip("transformers")
    code, out, err = finished(runs, "no_architectures")
    assert code == 0, err
    assert "config.json names no architectures: built BertModel; pick another class with --model-class" in err
    assert json.loads(out)["modules"][""]["module_type"] == "BertModel"


def test_train_step(capsys: pytest.CaptureFixture[str], tiny_module: Path) -> None:
    code, out, _ = run_main(capsys, "tinynet_cli:build", "--input-shape", "3,8", "--train", "--optimizer", "sgd",
                            "--loss", "mse")
    assert code == 0
    # forward MACs 3*(8*16 + 16*4) = 576; backward: first Linear dW 384 (the input needs no grad),
    # second dX 192 + dW 192 = 768; SGD: 2 FLOPs per parameter element, 212 elements = 424
    assert "forward FLOPs" in out and "(MACs 576)" in out and "(MACs 768;" in out
    assert "optimizer FLOPs:   424  (SGD)" in out
    assert "bwd FLOPs" in out and "optim FLOPs" in out and "step FLOPs" in out
    code, out, _ = run_main(capsys, "tinynet_cli:build", "--input-shape", "3,8", "--train", "--loss", "ce",
                            "--format", "json", "--meta")
    assert code == 0
    doc = json.loads(out)
    assert doc["summary"]["backward"]["macs"] == 768 and doc["summary"]["macs"] == 576
    # no optimizer asked for: the model's nodes are the forward's, the cross entropy the loss's
    assert {r["phase"] for r in doc["records"]} == {"forward", "loss"}
    loss = [r for r in doc["records"] if r["phase"] == "loss"]  # the CLI's loss: its targets and the cross entropy
    assert "F.cross_entropy" in [r["target"] for r in loss] and not any(r["module_path"] for r in loss)


@pytest.mark.parametrize("args, message", [
    (["--train", "--tracer", "fx"], "leave --tracer out"),
    (["--train", "--repeat", "3"], "--warmup and --repeat do not apply"),
    (["--optimizer", "adamw"], "go with --train"),
])
def test_train_bad_combinations(capsys: pytest.CaptureFixture[str], tiny_module: Path, args: list[str],
                                message: str) -> None:
    code, _, err = run_main(capsys, "tinynet_cli:build", "--input-shape", "3,8", *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_generate_writes_its_html_report_and_refuses_what_it_cannot_draw(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    hf = pytest.importorskip("transformers")
    hf.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                   num_key_value_heads=2, vocab_size=50, max_position_embeddings=64,
                   architectures=["LlamaForCausalLM"]).save_pretrained(tmp_path)
    config = str(tmp_path / "config.json")
    page = tmp_path / "gen.html"
    assert main([config, "--generate", "3", "--tokens", "1,4", "--html", str(page), "--hardware", "l4"]) == 0
    assert f"wrote {page}" in capsys.readouterr().err
    text = page.read_text()
    # the whole run, the prefill (4 prompt tokens) and the 2 decode steps (3 new tokens: the last is never fed)
    for title in ("whole generation (3 steps)", "prefill (step 0, 4 tokens in, context 4)",
                  "decode (step 1, 1 token in, context 5)", "decode (step 2, 1 token in, context 6)"):
        assert json.dumps(title) in text
    for argv, message in (([config, "--generate", "2", "--plot", str(tmp_path / "r.png")], "--plot needs --hardware"),
                          ([config, "--meta", "--generate", "2", "--sweep", "batch=1", "--hardware", "l4", "--html",
                            str(page)], "--html writes the steps of one --generate run")):
        assert main(argv) == 2
        assert message in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--output", "{same}", "--html", "{same}"], "--output and --html name the same file"),
    (["--format", "json", "--output", "{same}", "--chrome-trace", "{same}"], "--output and --chrome-trace name the same"),
    (["--sweep", "batch=1,8"], "--sweep goes with --generate N"),
    (["--output", ""], "cannot write '': the path is empty"),
])
def test_outputs_and_sweeps_that_cannot_apply_are_refused_before_running(
        capsys: pytest.CaptureFixture[str], tiny_module: Path, tmp_path: Path, args: list[str], message: str) -> None:
    same = str(tmp_path / "same.txt")
    code, out, err = run_main(capsys, "tinynet_cli:build", "--input-shape", "3,8",
                              *[a.replace("{same}", same) for a in args])
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1 and out == ""
    assert not (tmp_path / "same.txt").exists()  # nothing ran, nothing written


def test_a_sweep_axis_given_twice_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    hf = pytest.importorskip("transformers")
    hf.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                   num_key_value_heads=2, vocab_size=50, max_position_embeddings=64,
                   architectures=["LlamaForCausalLM"]).save_pretrained(tmp_path)
    code, _, err = run_main(capsys, str(tmp_path / "config.json"), "--meta", "--generate", "2", "--sweep", "batch=1",
                            "batch=2", "prompt=4", "--hardware", "h100-sxm")
    assert code == 2 and "--sweep gives batch= twice" in err


def test_generate_announces_its_output_and_refuses_the_table_format(tmp_path: Any, capsys: Any) -> None:
    out = tmp_path / "gen.json"
    assert main(["llama", "--generate", "2", "--tokens", "1,4", "--format", "json", "--output", str(out)]) == 0
    assert f"torch-flops: wrote {out}" in capsys.readouterr().err and json.loads(out.read_text())["steps"]
    assert main(["llama", "--generate", "2", "--tokens", "1,4", "--format", "table"]) == 2
    assert "--format table does not apply to --generate" in capsys.readouterr().err


def test_a_file_is_no_model_and_two_outputs_through_a_link(capsys: pytest.CaptureFixture[str], tiny_module: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tiny_module)
    code, out, err = run_main(capsys, "tinynet_cli.py", "--input-shape", "2,8")
    assert code == 2 and out == ""
    assert "tinynet_cli.py is a file, not a MODEL" in err and "tinynet_cli:factory" in err
    (tiny_module / "alias.html").symlink_to("report.json")  # --html through a link to --output's file
    code, _, err = run_main(capsys, "tinynet_cli:build", "--input-shape", "2,8", "--format", "json", "--output",
                            "report.json", "--html", "alias.html")
    assert code == 2 and "--output and --html name the same file" in err
    assert not (tiny_module / "report.json").exists()


def test_repeated_sweeps_add_up(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(capsys, "gpt2", "--meta", "--generate", "2", "--sweep", "batch=1,2", "--sweep",
                            "prompt=4,8", "--hardware", "h100-sxm", "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["batch"], r["prompt"]) for r in rows] == [("1", "4"), ("1", "8"), ("2", "4"), ("2", "8")]


def test_diff_and_merge_report_a_failed_write_as_bad_input(capsys: pytest.CaptureFixture[str],
                                                          tmp_path: Path) -> None:
    profile = tmp_path / "a.json"
    code, _, _ = run_main(capsys, "unet", "--meta", "--input-shape", "1,3,16,16", "--format", "json", "--output",
                          str(profile), "--quiet")
    assert code == 0
    (tmp_path / "out.md").symlink_to(tmp_path / "missing" / "out.md")
    for args in (["diff", str(profile), str(profile), "--fail-on", "flops>+1%"], ["merge", str(profile)]):
        code, _, err = run_main(capsys, *args, "--output", str(tmp_path / "out.md"))
        assert code == 2 and "Traceback" not in err and "no such directory" in err, err  # (1 is a crossed gate)
    not_a_profile = tmp_path / "gen.json"
    not_a_profile.write_text('{"schema": "torch_flops.generation", "version": 1}')
    code, _, err = run_main(capsys, "diff", str(profile), str(not_a_profile))
    assert code == 2 and f"{not_a_profile}: not a torch_flops profile" in err


def test_two_outputs_on_devices_are_written_into(capsys: pytest.CaptureFixture[str], tiny_module: Path) -> None:
    code, _, err = run_main(capsys, "tinynet_cli:build", "--input-shape", "2,8", "--format", "json", "--output",
                            "/dev/null", "--html", "/dev/null")
    assert code == 0 and "name the same file" not in err
