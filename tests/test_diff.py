"""``torch_flops.diff`` and ``torch-flops diff``: two profiles with hand-made changes (a layer
widened, a layer removed, a module renamed), in every format, the gate and its exit codes, and the
HTML diff view in headless Chromium."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import torch_flops
from torch_flops import TorchFLOPsByFX
from torch_flops.cli import main
from torch_flops.diff import parse_check


class Block(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(16, hidden), nn.ReLU(), nn.Linear(hidden, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class Net(nn.Module):
    """A: block of width 32, a ``proj`` layer, a ``head``. B: the block widened to 64, ``proj``
    removed, ``head`` renamed ``classifier``."""

    def __init__(self, hidden: int = 32, proj: bool = True, head: str = "head") -> None:
        super().__init__()
        self.block = Block(hidden)
        self.proj = nn.Linear(16, 16) if proj else None
        self.head_name = head
        setattr(self, head, nn.Linear(16, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.block(x)
        if self.proj is not None:
            x = self.proj(x)
        return getattr(self, self.head_name)(x)


class FixedClock:
    """Every node takes ``ms``."""

    def __init__(self, ms: float) -> None:
        self.ms = ms

    def tick(self) -> int:
        return 0

    def finish(self) -> None:
        pass

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return self.ms


def _profile(model: nn.Module, ms: float = 0.5, repeat: int = 3) -> torch_flops.Profile:
    counter = TorchFLOPsByFX(model, warmup=1, repeat=repeat, timer=FixedClock(ms))
    with torch.no_grad():
        counter.propagate(torch.randn(8, 16))
    return counter.profile


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A (0.5 ms a node) and B (1 ms a node), both timed 3 times, as profiles and as JSON files;
    and an untimed-repeat B (repeat 1)."""
    torch.manual_seed(0)
    a, b = _profile(Net()), _profile(Net(64, proj=False, head="classifier"), ms=1.0)
    once = _profile(Net(64, proj=False, head="classifier"), repeat=1)
    directory = tmp_path_factory.mktemp("diff")
    paths = {}
    for name, p in (("a", a), ("b", b), ("once", once)):
        paths[name] = directory / f"{name}.json"
        report_text = torch_flops.report.profile_to_json(p)
        paths[name].write_text(report_text)
    return {"a": a, "b": b, "once": once, "paths": paths, "dir": directory}


# The numbers, batch 8:
#   block.fc1 Linear(16, 32): 8*16*32 = 4096 MACs, 2*4096 + 8*32 bias = 8448 FLOPs;
#             widened to Linear(16, 64): 8192 MACs, 16384 + 512 = 16896 FLOPs (+8448, +100%)
#   block.act ReLU over 8x32 = 256 FLOPs -> 8x64 = 512 (+256)
#   block.fc2 Linear(32, 16): 4096 MACs, 8192 + 128 = 8320 FLOPs -> Linear(64, 16): 8192 MACs,
#             16384 + 128 = 16512 FLOPs (+8192)
#   block:    +8448 + 256 + 8192 = +16896
#   proj      Linear(16, 16): 2048 MACs, 4096 + 128 = 4224 FLOPs, removed (-4224); 16*16 + 16 = 272 params
#   head      Linear(16, 4): 512 MACs, 1024 + 32 = 1056 FLOPs, renamed classifier, unchanged
#   total:    A 8448 + 256 + 8320 + 4224 + 1056 = 22304; B 16896 + 512 + 16512 + 1056 = 34976 (+12672, +56.81%)
#   params:   A 544 + 528 + 272 + 68 = 1412; B 1088 + 1040 + 68 = 2196 (+784)
#   time:     A 5 nodes x 0.5 ms = 2.5 ms; B 4 nodes x 1 ms = 4 ms (+60%)
def test_rows_of_hand_made_changes(pair: dict[str, Any]) -> None:
    d = torch_flops.diff(pair["a"], pair["b"])
    total = d.total
    assert (total.a["flops"], total.b["flops"], total.delta("flops")) == (22304, 34976, 12672)
    assert total.relative("flops") == pytest.approx(100 * 12672 / 22304)
    assert (total.a["params"], total.b["params"], total.delta("params")) == (1412, 2196, 784)
    assert (total.a["time_ms"], total.b["time_ms"]) == (2.5, 4.0)
    fc1 = d.module("block.fc1")
    assert fc1 is not None and fc1.status == "changed" and fc1.delta("flops") == 8448 and fc1.relative("flops") == 100
    assert fc1.delta("macs") == 4096 and fc1.delta("params") == (16 * 64 + 64) - (16 * 32 + 32)
    assert d.module("block.act").delta("flops") == 256  # type: ignore[union-attr]
    assert d.module("block.fc2").delta("flops") == 8192  # type: ignore[union-attr]
    assert d.module("block").delta("flops") == 16896  # type: ignore[union-attr]
    proj = d.module("proj")
    assert proj is not None and proj.status == "removed" and proj.delta("flops") == -4224 and proj.b == {}
    assert proj.delta("params") == -272 and proj.relative("flops") == -100
    assert d.renamed == {"head": "classifier"}
    head = d.module("classifier")
    assert head is not None and head is d.module("head") and head.status == "renamed" and head.old_key == "head"
    assert head.delta("flops") == 0 and head.a["flops"] == head.b["flops"] == 1056
    # sorted by absolute change: block (+16896), the model (+12672), Linear (operator), fc1 (+8448), ...
    keys = [(r.kind, r.key) for r in d.rows]
    assert keys[:2] == [("module", "block"), ("module", "")]
    assert keys.index(("module", "block.fc1")) < keys.index(("module", "block.fc2")) < keys.index(("module", "proj"))
    linear = next(r for r in d.rows if r.kind == "operator" and r.key == "Linear")
    assert linear.delta("flops") == 8448 + 8192 - 4224  # every Linear's change together
    assert all(r.status != "unchanged" for r in d.rows)
    assert len(torch_flops.diff(pair["a"], pair["a"]).rows) == 0
    assert repr(d) == "ProfileDiff(A -> B: FLOPs +12.7 K (+56.81%), 9 changed rows)"


@pytest.mark.parametrize("labels", [("before", "after", "extra"), ("only",), 5, "ab", ("a", 2)])
def test_labels_must_be_two_strings(pair: dict[str, Any], labels: Any) -> None:
    # they were taken as given and failed later, in text(), with unpacking errors ("ab" became a and b)
    with pytest.raises(TypeError, match=r"^labels must be two strings \(a's name, b's name\), got "):
        torch_flops.diff(pair["a"], pair["b"], labels=labels)
    assert torch_flops.diff(pair["a"], pair["b"], labels=["old", "new"]).text().count("old") >= 1


def test_row_metrics_take_the_gate_names(pair: dict[str, Any]) -> None:
    # the times above: A 2.5 ms, B 4 ms -> +1.5 ms, +60%; "time" (the gate's name) reads "time_ms"
    total = torch_flops.diff(pair["a"], pair["b"]).total
    assert total.delta("time") == total.delta("time_ms") == pytest.approx(1.5)
    assert total.relative("time") == pytest.approx(60.0)
    with pytest.raises(ValueError, match="unknown metric 'latency'.*time_ms"):
        total.delta("latency")  # a silent None would read as "not measured"
    with pytest.raises(ValueError, match="unknown metric 'FLOPs'"):
        total.relative("FLOPs")


def test_every_format(pair: dict[str, Any], tmp_path: Path) -> None:
    d = torch_flops.diff(pair["paths"]["a"], pair["paths"]["b"])  # from the JSON files
    assert d.labels == ("a.json", "b.json") and d.total.delta("flops") == 12672
    text = d.text()
    assert "renamed: head -> classifier" in text and "removed: proj (Linear)" in text
    fc1_line = next(line for line in text.splitlines() if "block.fc1 (Linear)" in line)
    assert "+8.45 K" in fc1_line and "8.45 K -> 16.9 K (+100.00%)" in fc1_line
    assert ["FLOPs", "22.3", "K", "35.0", "K", "+12.7", "K", "+56.81%"] in [line.split() for line in text.splitlines()]
    md = d.markdown(checks=["flops>+1%"])
    assert md.startswith("**torch_flops diff**: A = `a.json`, B = `b.json`")
    assert "- renamed: head -> classifier" in md and "| module   | block.fc1 (Linear)" in md
    assert "❌ FAIL flops>+1%" in md
    doc = json.loads(d.to_json(checks=["params>0"]))
    assert doc["schema"] == "torch_flops.diff" and doc["version"] == 1
    assert doc["totals"]["flops"] == {"a": 22304, "b": 34976, "delta": 12672, "relative": pytest.approx(56.8149, 1e-4)}
    rows = {(r["kind"], r["key"]): r for r in doc["rows"]}
    assert rows[("module", "block.fc1")]["delta"]["flops"] == 8448
    assert rows[("module", "classifier")]["old_key"] == "head"
    assert rows[("module", "proj")]["status"] == "removed" and rows[("module", "proj")]["b"]["flops"] is None
    assert [v["expr"] for v in doc["violations"]] == ["params>0"]
    path = d.to_html(tmp_path / "diff.html", checks=["flops>+1%"])
    page = Path(path).read_text()
    assert page.startswith("<!DOCTYPE html>") and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert '"schema":"torch_flops.diff"' in page
    assert d.text(top=2).count("\n") < text.count("\n") and "more row(s)" in d.text(top=2)
    assert "block.fc1" not in d.text(depth=1).split("changes, largest first:")[1]


def test_the_gate(pair: dict[str, Any]) -> None:
    d = torch_flops.diff(pair["a"], pair["b"])
    assert [v.expr for v in d.check(["flops>+1%", "flops>+60%", "params>0", "macs<0"])] == ["flops>+1%", "params>0"]
    (fc1,) = d.check(["flops@block.fc1>=+100%"])
    assert fc1.scope == "block.fc1" and fc1.delta == 8448 and fc1.relative == 100
    removed = d.check(["flops@*<-50%"])
    assert [v.scope for v in removed] == ["proj"] and "the module was removed" in removed[0].message
    assert [v.scope for v in d.check(["params@*>0"])] == ["block", "", "block.fc1", "block.fc2"]
    (slower,) = d.check(["time>+10%"])  # 2.5 ms -> 4 ms, medians over 3 calls
    assert slower.relative == pytest.approx(60.0) and "went from 2.50 ms to 4.00 ms (+60.00%)" in slower.message
    assert d.check(["time>+61%"]) == []
    with pytest.raises(ValueError, match="repeat=1; time gates compare medians"):
        torch_flops.diff(pair["a"], pair["once"]).check(["time>+10%"])
    with pytest.raises(ValueError, match="unknown metric 'flop'"):
        d.check(["flop>1%"])
    with pytest.raises(ValueError, match="expected METRIC"):
        parse_check("flops is bigger")
    with pytest.raises(ValueError, match="no module 'nowhere'"):
        d.check(["flops@nowhere>0"])
    assert parse_check("flops@layers.0 >= -2.5%").value == -2.5


@pytest.mark.parametrize(("checks", "code"), [
    ([], 0), (["flops>+60%"], 0), (["flops>+1%"], 1), (["params>0"], 1), (["flops@*<-50%"], 1),
    (["time>+10%"], 1), (["time>+61%"], 0), (["flops>+1%", "params>1000"], 1),
])
def test_cli_gate_exit_codes(pair: dict[str, Any], capsys: pytest.CaptureFixture[str], checks: list[str],
                             code: int) -> None:
    args = ["diff", str(pair["paths"]["a"]), str(pair["paths"]["b"])]
    for check in checks:
        args += ["--fail-on", check]
    assert main(args) == code
    out, err = capsys.readouterr()
    assert out.startswith("torch_flops diff: A = a.json")
    failed = [line for line in err.splitlines() if line.startswith("torch-flops diff: FAIL ")]
    assert bool(failed) == (code == 1)
    if checks == ["flops>+1%", "params>1000"]:
        assert failed == [("torch-flops diff: FAIL flops>+1%: FLOPs of the model went from 22.3 K to 35.0 K "
                           "(+56.81%); crossed > +1%")]


@pytest.mark.parametrize(("args", "message"), [
    (["--fail-on", "time>+10%"], "time gates compare medians and need both profiles timed with repeat >= 3"),
    (["--fail-on", "speed>1"], "unknown metric 'speed'"),
    (["--format", "json", "--top", "5"], "--top and --depth shape the text and markdown tables"),
])
def test_cli_refuses_with_code_2(pair: dict[str, Any], capsys: pytest.CaptureFixture[str], args: list[str],
                                 message: str) -> None:
    assert main(["diff", str(pair["paths"]["a"]), str(pair["paths"]["once"]), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert main(["diff", str(pair["paths"]["a"]), "/no/such.json"]) == 2
    assert "no such profile: /no/such.json" in capsys.readouterr().err


def test_cli_formats_and_files(pair: dict[str, Any], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    a, b = str(pair["paths"]["a"]), str(pair["paths"]["b"])
    assert main(["diff", a, b, "--format", "markdown"]) == 0
    assert capsys.readouterr().out.startswith("**torch_flops diff**")
    assert main(["diff", a, b, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["totals"]["flops"]["delta"] == 12672
    target = tmp_path / "d.html"
    assert main(["diff", a, b, "--format", "html", "--output", str(target), "--fail-on", "params>0"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and f"torch-flops: wrote {target}" in err and "FAIL params>0" in err
    assert target.read_text().startswith("<!DOCTYPE html>")


# ---------------------------------------------------------------------- in a browser (conftest's `browser`)


def test_diff_view_in_chromium(pair: dict[str, Any], browser: Any, tmp_path: Path) -> None:
    d = torch_flops.diff(pair["a"], pair["b"])
    path = d.to_html(tmp_path / "diff.html", checks=["flops>+1%", "flops>+60%"])
    page = browser.open(Path(path).as_uri())
    assert page.evaluate("document.body.dataset.ready") == "1"
    # a change whose last bit depends on the order of a sum prints as the text prints it (both read
    # it to 12 digits): 197.505 from either side, and the double nearest 197.505 lies just below it
    from torch_flops.diff import _pct_text

    for value in (197.50500000000002, 197.50499999999997):
        assert page.evaluate(_numbers_js(f"changePct({value!r}, 1)")) == _pct_text(value) == "+197.50%"
    rows = "[...document.querySelectorAll('#diff tbody tr')]"
    cell = "r => r.children[1].textContent"
    assert page.evaluate(f"{rows}.length") == len(d.rows) == 9
    assert page.evaluate(f"{rows}.map({cell})")[:2] == ["block", "(root)"]  # largest change first
    assert page.evaluate("[...document.querySelectorAll('#gate li')].map(li => li.className)") == ["fail", "pass"]
    # sort by the FLOPs change: click once (largest first), twice (smallest first: proj's -4.22 K)
    page.evaluate("document.querySelector('#diff th[data-key=flops_d]').click()")
    assert page.evaluate(f"{rows}.map({cell})")[0] == "block"
    page.evaluate("document.querySelector('#diff th[data-key=flops_d]').click()")
    assert page.evaluate(f"{rows}.map({cell})")[0] == "proj"
    assert page.evaluate("document.querySelector('#diff th[data-key=flops_d]').className") == "num asc"
    # filter: the text box, then the status select
    page.evaluate("{ const i = document.querySelector('#diff input.filter'); i.value = 'fc'; "
                  "i.dispatchEvent(new Event('input')); }")
    assert sorted(page.evaluate(f"{rows}.map({cell})")) == ["block.fc1", "block.fc2"]
    page.evaluate("{ const i = document.querySelector('#diff input.filter'); i.value = ''; "
                  "i.dispatchEvent(new Event('input')); const s = document.querySelector('#diff select.select-status');"
                  "s.value = 'renamed'; s.dispatchEvent(new Event('change')); }")
    assert page.evaluate(f"{rows}.map({cell})") == ["head \u2192 classifier"]
    # every change % as the text report writes it (_pct_text: "+0.00%" for no change, "-100.00%" for
    # proj's removal, "new"/"gone" for a change from nothing)
    from torch_flops.diff import _pct_text
    page.evaluate("{ const s = document.querySelector('#diff select.select-status'); s.value = ''; "
                  "s.dispatchEvent(new Event('change')); }")
    for m in d.metrics:
        shown = page.evaluate(
            f"(() => {{ const i = [...document.querySelectorAll('#diff th')].findIndex(t => t.dataset.key === '{m}_r');"
            f" return {rows}.map(r => [r.children[1].textContent, r.children[i].textContent]); }})()")
        expected = {(r.old_key + " \u2192 " + r.key if r.old_key else r.key or "(root)"): _pct_text(r.relative(m))
                    for r in d.rows}
        assert dict(shown) == expected, m
    totals = page.evaluate("[...document.querySelectorAll('#totals tbody tr')].map(r => r.lastChild.textContent)")
    assert totals == [_pct_text(d.total.relative(m)) for m in d.metrics]
    # B -> A: proj comes from nothing, "new" in both (its ratio is infinite; the data carries null)
    back = torch_flops.diff(pair["b"], pair["a"])
    page2 = browser.open(Path(back.to_html(tmp_path / "back.html")).as_uri())
    proj = page2.evaluate(
        "(() => { const i = [...document.querySelectorAll('#diff th')].findIndex(t => t.dataset.key === 'flops_r');"
        f" return {rows}.filter(r => r.children[1].textContent === 'proj').map(r => r.children[i].textContent); }})()")
    assert proj == ["new"] == [_pct_text(r.relative("flops")) for r in back.rows if r.key == "proj"]
    assert page2.errors() == []
    assert page.errors() == []
    png = page.screenshot()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert width == 1280 and height >= 600


def _numbers_js(expression: str) -> str:
    """``expression`` evaluated with the page's number formats (the section of its script that
    writes numbers as torch_flops.report does) in scope."""
    from torch_flops.html import _JS

    section = _JS.split("numbers, as torch_flops.report writes them")[1].split("\n// ----")[0]
    return f"(() => {{ {section}\n return {expression}; }})()"


def test_a_malformed_profile_is_named_and_refused_with_code_2(pair: dict[str, Any], tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    document = json.loads(Path(pair["paths"]["a"]).read_text())
    no_records = tmp_path / "norec.json"
    no_records.write_text(json.dumps({k: v for k, v in document.items() if k != "records"}))
    no_flops = tmp_path / "noflops.json"
    no_flops.write_text(json.dumps({**document, "records": [{k: v for k, v in document["records"][0].items()
                                                              if k != "flops"}]}))
    not_json = tmp_path / "bad.json"
    not_json.write_text("{nope")
    for path, said in ((no_records, "not a readable torch_flops profile (KeyError: 'records')"),
                       (no_flops, "not a readable torch_flops profile (KeyError: 'flops')"),
                       (not_json, "no JSON")):
        assert main(["diff", str(path), str(pair["paths"]["a"]), "--fail-on", "flops>+1%"]) == 2  # not "crossed"
        err = capsys.readouterr().err
        assert f"{path.name}: {said}" in err and "Traceback" not in err
        with pytest.raises(ValueError, match=said.replace("(", r"\(").replace(")", r"\)")):
            torch_flops.Profile.from_json(path)
    with pytest.raises(TypeError, match="got int"):  # never taken as a file descriptor (read and closed)
        torch_flops.Profile.from_json(0)  # type: ignore[arg-type]


def test_gates_that_cannot_be_evaluated_are_refused(pair: dict[str, Any]) -> None:
    result = torch_flops.diff(pair["a"], pair["b"])
    with pytest.raises(ValueError, match="neither profile has a backward"):
        result.check(["backward_flops>-100%"])
    with pytest.raises(ValueError, match="neither profile has an optimizer step"):
        result.check(["optimizer_flops>=0"])
    in_macs = torch_flops.diff(pair["a"], pair["a"].with_convention("macs"))
    with pytest.raises(ValueError, match="different conventions"):  # 22304 FLOPs vs its own MACs is no regression
        in_macs.check(["flops<-1%"])
    assert result.check(["params>0"])  # a gate that can be evaluated still is: B has 784 more parameters


def test_the_whole_model_s_time_is_one_number_in_its_row_and_its_gate() -> None:
    # two nodes timed over 3 calls each by a scripted timer. A: every node 1 ms (calls 2, 2, 2 ms).
    # B: node 0 takes 1, 1, 10 and node 1 10, 1, 1 ms: the calls 11, 2, 11 ms, median latency 11 ms; the
    # node medians are 1 and 1 (2 ms summed). The total row said 2 -> 2 ms, +0%, while time>+10% failed
    # on 2 -> 11 ms: both are the median latency now, +450%
    class Scripted:
        def __init__(self, times: list[float]) -> None:
            self.times, self.n = list(times), 0

        def tick(self) -> int:
            self.n += 1
            return self.n

        def finish(self) -> None:
            pass

        def elapsed_ms(self, start: int, end: int) -> float:
            return self.times.pop(0)

    def profiled(times: list[float]) -> torch_flops.Profile:
        torch.manual_seed(0)
        counter = TorchFLOPsByFX(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), timer=Scripted(times), repeat=3)
        with torch.no_grad():
            counter.propagate(torch.randn(2, 4))
        return counter.profile

    d = torch_flops.diff(profiled([1.0] * 6), profiled([1.0, 10.0, 1.0, 1.0, 10.0, 1.0]))
    assert (d.total.a["time_ms"], d.total.b["time_ms"]) == (2.0, 11.0)
    assert d.total.relative("time_ms") == pytest.approx(450.0)
    [violation] = d.check(["time>+10%"])
    assert "from 2.00 ms to 11.0 ms (+450.00%)" in violation.message


def test_a_profile_whose_timed_call_raised_is_timed_by_fewer_calls_and_refused_by_a_time_gate() -> None:
    # warmup=1, repeat=3: the model raises on its 2nd call (the first timed one), which ends the extra calls;
    # the real call runs and succeeds. Its times come from that one call: said in a warning and in the
    # summary (1 timed call, not repeat's 3), and a time gate, which needs medians of 3, refuses it
    calls: list[int] = []  # (outside the model: the extra calls put its own attributes back)

    class Flaky(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            calls.append(1)
            if len(calls) == 2:
                raise RuntimeError("once")
            return self.l(x)

    steady = TorchFLOPsByFX(nn.Linear(4, 4), warmup=1, repeat=3)
    steady.propagate(torch.randn(2, 4))
    flaky = TorchFLOPsByFX(Flaky(), warmup=1, repeat=3)
    with pytest.warns(UserWarning, match=r"timed call 2 of 4 raised RuntimeError: once; .* from 1 of the 3 timed"):
        flaky.propagate(torch.randn(2, 4))
    assert torch_flops.report.model_summary(flaky.profile).timed_calls == 1
    assert torch_flops.report.model_summary(steady.profile).timed_calls == 3
    with pytest.raises(ValueError, match=r"B's times come from 1 call\(s\) of the 3 asked for"):
        torch_flops.diff(steady.profile, flaky.profile).check(["time>+10%"])


def test_timed_calls_that_ran_other_ops_are_left_out_and_said_so() -> None:
    # repeat=3: the model runs one more op on its 2nd call (a branch on a count kept outside it), so that
    # call's times are not the real call's program: left out, with a warning; 2 calls time the profile
    calls: list[int] = []

    class Branchy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            calls.append(1)
            y = self.l(x)
            return y.relu() if len(calls) == 2 else y

    counter = TorchFLOPsByFX(Branchy(), repeat=3)
    with pytest.warns(UserWarning, match=r"1 timed call\(s\) ran other ops than the real call.* from 2 of the 3 timed"):
        counter.propagate(torch.randn(2, 4))
    assert torch_flops.report.model_summary(counter.profile).timed_calls == 2
    with pytest.raises(ValueError, match=r"come from 2 call\(s\) of the 3 asked for \(a timed call raised, or ran"):
        torch_flops.diff(counter.profile, counter.profile).check(["time>+10%"])


def test_one_warning_counts_the_timed_calls_left_out_for_either_cause() -> None:
    # repeat=4: the 1st timed call runs one more Linear, the 2nd raises (ending the extra calls): the times
    # come from the real call alone, as the warning and the summary both say (it said 2, hiding the first)
    calls: list[int] = []

    class Flaky(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            calls.append(1)
            if len(calls) == 1:
                x = self.b(x)
            if len(calls) == 2:
                raise RuntimeError("flaky")
            return self.a(x)

    counter = TorchFLOPsByFX(Flaky(), repeat=4)
    with pytest.warns(UserWarning, match=r"raised RuntimeError: flaky; .* and 1 timed call\(s\) ran other ops .* "
                                         r"from 1 of the 4 timed call\(s\)"):
        counter.propagate(torch.randn(3, 8))
    assert torch_flops.report.model_summary(counter.profile).timed_calls == 1
