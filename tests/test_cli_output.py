"""The command line's output as a person expects it (issue 18, item 5): warm timings by default
(a cold first call labelled as such), "wrote PATH" after every file, the model summary and a
legend, % FLOPs in the tree, no all-"-" time columns on meta, markdown at a depth, combinations
that cannot apply refused, ``--help`` listing the commands, "did you mean", output piped into
``head`` ending quietly, a ``config.json`` built as its ``architectures[0]``, ``--html``, and
``examples/distributed.py`` writing where the README says."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from torch_flops import Profile
from torch_flops.cli import main

ROOT = Path(__file__).resolve().parent.parent
UNET = ["unet", "--input-shape", "1,3,16,16"]


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------------- subprocesses, started together
@pytest.fixture(scope="module")
def shell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, subprocess.Popen[str]]]:
    """Pipes into `head` (bash's PIPESTATUS gives torch-flops' own status) and the distributed example."""
    if shutil.which("bash") is None:
        pytest.skip("the pipes are run by bash")
    directory = tmp_path_factory.mktemp("pipes")
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    python = sys.executable
    profiles = " ".join(str(directory / f"p{i}.json") for i in range(2))
    commands = {
        "list_head": f"{python} -m torch_flops --list 2> list.err | head -0; echo status=${{PIPESTATUS[0]}}",
        "merge_head": (f"for i in 0 1; do {python} -m torch_flops unet --input-shape 1,3,16,16 --meta --format json "
                       f"--output p$i.json --quiet || exit 9; done; "
                       f"{python} -m torch_flops merge {profiles} 2> merge.err | head -1; echo status=${{PIPESTATUS[0]}}"),
    }
    started = {name: subprocess.Popen(["bash", "-c", command], cwd=directory, env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
               for name, command in commands.items()}
    torchrun = [python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                str(ROOT / "examples" / "distributed.py"), str(directory / "dist")]
    started["example"] = subprocess.Popen(torchrun, cwd=directory, env=env, text=True, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE)
    started["dir"] = directory  # type: ignore[assignment]
    yield started
    for process in started.values():
        if isinstance(process, subprocess.Popen) and process.poll() is None:
            process.kill()
            process.wait()


def _finished(shell: dict[str, subprocess.Popen[str]], name: str) -> tuple[int, str, str]:
    out, err = shell[name].communicate(timeout=300)
    return shell[name].returncode, out, err


def test_piped_into_head_ends_quietly(shell: dict[str, subprocess.Popen[str]]) -> None:
    directory = shell["dir"]
    code, out, err = _finished(shell, "list_head")
    assert code == 0 and out.strip() == "status=0", err
    assert (directory / "list.err").read_text() == ""  # type: ignore[operator]
    code, out, err = _finished(shell, "merge_head")
    assert code == 0, err
    first, status = out.strip().splitlines()
    assert first == "torch_flops merged profile: 2 ranks" and status == "status=0"
    assert "Traceback" not in (directory / "merge.err").read_text()  # type: ignore[operator]


def test_distributed_example_writes_where_the_readme_says(shell: dict[str, subprocess.Popen[str]]) -> None:
    code, out, err = _finished(shell, "example")
    assert code == 0, err
    written = shell["dir"] / "dist"  # type: ignore[operator]
    assert sorted(p.name for p in written.iterdir()) == ["profile-0.json", "profile-1.json"]
    assert f"wrote {written / 'profile-0.json'}" in out
    # without an argument: examples/out/, which the README names and git ignores
    readme = (ROOT / "README.md").read_text()
    assert "examples/out/profile-0.json" in readme
    source = (ROOT / "examples" / "distributed.py").read_text()
    assert 'OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")' in source
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    for path in ("examples/out/profile-0.json", "profile-1.json", "resnet50.html"):
        assert subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, check=False).returncode == 0, path


# ---------------------------------------------------------------------- in-process
def test_timings_are_warm_by_default_and_a_cold_call_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(capsys, *UNET, "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["settings"]["warmup"] == 1 and doc["summary"]["model"]["warm"] is True
    code, out, _ = run_main(capsys, *UNET, "--depth", "1")
    assert code == 0 and "cold" not in out
    code, out, _ = run_main(capsys, *UNET, "--depth", "1", "--warmup", "0")
    latency = next(line for line in out.splitlines() if line.startswith("Latency:"))
    assert "first (cold) call" in latency and "--warmup 1" in latency
    assert "latency (cold)" in out and "the first, cold, call" in out.replace("\n  ", " ")


def test_summary_legend_and_tree_share(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(capsys, *UNET, "--depth", "1", "--quiet")
    lines = out.splitlines()
    assert code == 0 and lines[:4] == ["torch_flops profile", "=" * 19, "Model:       UNet",
                                       "Inputs:      x (1, 3, 16, 16) float32"]
    for key in ("Params:", "Model size:", "MACs:", "FLOPs:", "Latency:", "Throughput:", "FLOP/s:", "Peak memory:"):
        assert any(line.startswith(key) for line in lines), key
    tree_header = next(line for line in lines if line.startswith("module "))
    assert "% FLOPs" in tree_header and "Legend: params = parameters" in out
    code, out, _ = run_main(capsys, *UNET, "--format", "table", "--group-by", "operator", "--quiet")
    assert code == 0 and out.startswith("torch_flops profile\n") and "\nLegend: " in out


def test_meta_tables_drop_the_time_columns(capsys: pytest.CaptureFixture[str]) -> None:
    for args in (["--format", "table"], ["--format", "table", "--group-by", "module"], ["--depth", "1"],
                 ["--format", "markdown", "--group-by", "operator"]):
        code, out, _ = run_main(capsys, *UNET, "--meta", *args)
        headers = [line for line in out.splitlines() if line.startswith(("node ", "module ", "| operator"))]
        assert code == 0 and headers, args
        assert all("time" not in h and "latency" not in h for h in headers), headers


def test_markdown_honours_the_depth(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(capsys, *UNET, "--meta", "--format", "markdown", "--group-by", "module", "--depth", "1")
    rows = [line.split("|")[1].strip() for line in out.splitlines()[4:]]
    assert code == 0 and rows == ["(root)", "down", "pool", "bottleneck", "up", "up_conv", "head"]
    code, out, _ = run_main(capsys, *UNET, "--meta", "--format", "csv", "--group-by", "module", "--depth", "0")
    assert code == 0 and len(out.strip().splitlines()) == 2  # the header and the root


def test_every_file_written_is_announced(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    files = {"--output": tmp_path / "u.json", "--chrome-trace": tmp_path / "trace.json",
             "--plot": tmp_path / "roof.png", "--html": tmp_path / "u.html"}  # in the order they are written
    if importlib.util.find_spec("matplotlib") is None:
        del files["--plot"]
    args = [*UNET, "--format", "json", "--hardware", "h100-sxm"]
    for option, path in files.items():
        args += [option, str(path)]
    code, out, err = run_main(capsys, *args)
    assert code == 0 and out == ""
    assert [line for line in err.splitlines() if "wrote" in line] == [f"torch-flops: wrote {p}" for p in files.values()]
    assert all(p.stat().st_size > 0 for p in files.values())
    assert Profile.from_json(files["--output"]).total_flops > 0
    assert files["--html"].read_text().startswith("<!DOCTYPE html>")
    code, out, err = run_main(capsys, *UNET, "--meta", "--format", "json", "--output", str(tmp_path / "q.json"),
                              "--quiet")
    assert code == 0 and err == ""
    code, _, err = run_main(capsys, "merge", str(files["--output"]), "--output", str(tmp_path / "m.txt"))
    assert code == 0 and err.strip() == f"torch-flops: wrote {tmp_path / 'm.txt'}"


@pytest.mark.parametrize(("args", "message"), [
    (["--group-by", "module"], "--group-by chooses the rows of --format table, csv or markdown, not --format tree"),
    (["--format", "json", "--group-by", "operator"], "not --format json"),
    (["--format", "table", "--group-by", "module", "--all-nodes"], "--all-nodes adds the graph's plumbing"),
    (["--all-nodes"], "--all-nodes adds the graph's plumbing"),
    (["--format", "json", "--depth", "1"], "--depth does not apply to --format json"),
    (["--format", "markdown", "--depth", "1"], "--depth applies to --group-by module with --format markdown"),
    (["--format", "table", "--depth", "1", "--top", "0"], "--depth places the table's top modules"),
    (["--format", "csv", "--top", "5"], "--top lists the top modules of --format tree and table"),
    (["--format", "csv", "--hardware", "h100-sxm"], "--hardware puts the roofline in the tree"),
    (["--meta", "--warmup", "2"], "--warmup and --repeat time the model, and --meta measures no time"),
    (["--meta", "--repeat", "3"], "--meta measures no time"),
])
def test_combinations_that_cannot_apply_are_refused(capsys: pytest.CaptureFixture[str], args: list[str],
                                                    message: str) -> None:
    code, out, err = run_main(capsys, *UNET, *args)
    assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1, err


def test_help_lists_the_commands_and_typos_get_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(capsys, "--help")
    assert code == 0 and "torch-flops merge FILE" in out and "torch-flops diff A.json B.json" in out
    assert "--html FILE" in out and "--warmup 1" in out
    assert run_main(capsys, "merge", "--help")[0] == 0 and run_main(capsys, "diff", "--help")[0] == 0
    for args, hint in ((["unet", "--dpeth", "1"], "(did you mean --depth?)"),
                       (["unet", "--format", "tre"], "(did you mean tree?)"),
                       (["unet", "--hardwre", "h100-sxm"], "(did you mean --hardware?)"),
                       (["dif", "a.json", "b.json"], "(did you mean torch-flops diff?)"),
                       (["merg", "a.json"], "(did you mean torch-flops merge?)")):
        code, out, err = run_main(capsys, *args)
        assert code == 2 and out == "" and hint in err, err


def test_config_json_builds_its_architecture(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
                                     vocab_size=100, architectures=["BertForMaskedLM"])
    config.save_pretrained(tmp_path)
    code, out, err = run_main(capsys, str(tmp_path / "config.json"), "--meta", "--tokens", "1,8", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["modules"][""]["module_type"] == "BertForMaskedLM"  # not BertModel
    assert f"torch-flops: built BertForMaskedLM (architectures[0] of {tmp_path / 'config.json'}" in err
    config.architectures = ["NoSuchModelForAnything"]
    config.save_pretrained(tmp_path)
    code, out, err = run_main(capsys, str(tmp_path / "config.json"), "--meta", "--tokens", "1,8")
    assert code == 2 and "architectures[0] is 'NoSuchModelForAnything'" in err and "--model-class" in err
