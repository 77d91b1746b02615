"""The one-file HTML report (``torch_flops.html``): what it embeds, that it stands alone, and, in
headless Chromium, a zoo model's report and a training step's (tree rows, a sorted column, a
filtered table, phase tabs, no console error, a screenshot's size). Chromium tests skip where no
Chromium is installed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torch_flops
from torch_flops import TorchFLOPsByFX, TrainingProfiler, html, report, zoo
from torch_flops.records import Status


def _embedded(page: str) -> dict[str, Any]:
    found = re.search(r'<script type="application/json" id="tf-data">(.*?)</script>', page, re.DOTALL)
    assert found is not None
    return json.loads(found[1])  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def unet() -> TorchFLOPsByFX:
    torch.manual_seed(0)
    counter = TorchFLOPsByFX(zoo.get("unet").build().eval(), warmup=1)
    with torch.no_grad():
        counter.propagate(torch.randn(1, 3, 32, 32))
    return counter


@pytest.fixture(scope="module")
def training_step() -> torch_flops.Profile:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    optimizer = torch.optim.AdamW(model.parameters())
    x, y = torch.randn(8, 32), torch.randint(0, 10, (8,))
    with TrainingProfiler(model, optimizer) as prof:
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
        return prof.profiles[0]


# ---------------------------------------------------------------------- the file
def test_the_page_stands_alone_and_embeds_the_profile(unet: TorchFLOPsByFX, tmp_path: Path) -> None:
    path = unet.save_html(str(tmp_path / "unet.html"), hardware="h100-sxm")
    page = Path(path).read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count("<script") == 2 and "<link" not in page
    assert re.findall(r"(?:src|href)=", page) == []  # nothing loaded from anywhere
    assert "http" not in page.replace("http://www.w3.org/2000/svg", "")
    doc = _embedded(page)
    assert doc["kind"] == "profile" and len(doc["sections"]) == 1
    section = doc["sections"][0]
    p = unet.profile
    assert len(section["nodes"]) == len(p.records) and section["fields"] == list(html.NODE_FIELDS)
    nodes = [dict(zip(section["fields"], row)) for row in section["nodes"]]
    assert [n["flops"] for n in nodes] == [r.flops for r in p.records]
    assert [section["targets"][n["target"]] for n in nodes] == [r.target for r in p.records]
    paths = section["modules"]["path"]
    assert paths == list(p.by_module()) and section["modules"]["params"][0] == p.total_params
    # each node's chain is its module_chain, by index
    assert [[paths[i] for i in section["chains"][n["chain"]]] for n in nodes] == [list(r.module_chain)
                                                                                  for r in p.records]
    assert section["header"]["summary"] == [list(line) for line in report.summary_lines(p)]
    assert section["header"]["versions"]["torch"] == torch.__version__
    roof = section["roofline"]
    assert roof["hardware"] == "h100-sxm" and roof["timed"] is False and len(roof["points"]) > 10
    assert Path(p.to_html(tmp_path / "again.html")).exists()  # Profile.to_html


def test_text_cannot_close_the_script(tmp_path: Path, hand_profile: Any) -> None:
    p = hand_profile()
    odd = p.records[5]._replace(note="</script><script>alert(1)</script><!--")
    weird = torch_flops.Profile(records=(*p.records[:5], odd, *p.records[6:]), module_types=p.module_types,
                                module_params=p.module_params)
    page = html.render_html(weird)
    assert page.count("</script>") == 2 and "<!--" not in page.split('id="tf-data">')[1]
    assert _embedded(page)["sections"][0]["nodes"][5][html.NODE_FIELDS.index("note")].startswith("</script>")


def test_a_nan_is_shown_as_a_dash(hand_profile: Any) -> None:
    p = hand_profile()
    odd = torch_flops.Profile(records=(p.records[0]._replace(time_ms=float("nan")), *p.records[1:]),
                              module_types=p.module_types, module_params=p.module_params)
    nodes = _embedded(html.render_html(odd))["sections"][0]["nodes"]  # JSON has no NaN: it would not parse
    assert nodes[0][html.NODE_FIELDS.index("time_ms")] is None


def test_sections_and_bad_input(unet: TorchFLOPsByFX, hand_profile: Any, tmp_path: Path) -> None:
    page = html.render_document([("prefill", unet.profile), ("decode 1", hand_profile())])
    assert [s["title"] for s in _embedded(page)["sections"]] == ["prefill", "decode 1"]
    with pytest.raises(ValueError, match="at least one"):
        html.render_document([])
    with pytest.raises(TypeError, match="expected a torch_flops Profile"):
        html.render_document([("x", "not a profile")])  # type: ignore[list-item]
    json_path = tmp_path / "p.json"
    report.profile_to_json(hand_profile(), json_path)
    assert _embedded(Path(html.write_html(json_path, tmp_path / "p.html")).read_text())["sections"][0]["title"] == "Net"
    with pytest.raises(FileNotFoundError, match="no such directory"):
        html.write_html(hand_profile(), tmp_path / "no" / "p.html")


# ---------------------------------------------------------------------- in a browser (conftest's `browser`)


def _rows(page: Any, table: str, column: int) -> list[str]:
    return page.evaluate(f"[...document.querySelectorAll('{table} tbody tr')].map(r => r.children[{column}]"
                         ".textContent)")  # type: ignore[no-any-return]


def _click(page: Any, selector: str) -> None:
    page.evaluate(f"document.querySelector({json.dumps(selector)}).click()")


def _set(page: Any, selector: str, value: str, event: str) -> None:
    page.evaluate(f"{{ const e = document.querySelector({json.dumps(selector)}); e.value = {json.dumps(value)}; "
                  f"e.dispatchEvent(new Event('{event}')); }}")


def _png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def test_zoo_model_report_in_chromium(unet: TorchFLOPsByFX, browser: Any, tmp_path: Path) -> None:
    p = unet.profile
    modules = p.by_module()
    children = [path for path, m in modules.items() if m.depth == 1]  # down, pool, bottleneck, up, up_conv, head
    path = unet.to_html(str(tmp_path / "unet.html"), hardware="h100-sxm")
    page = browser.open(Path(path).as_uri())
    assert page.evaluate("document.body.dataset.ready") == "1"
    assert page.evaluate("document.querySelector('h1').textContent") == "UNet \u2014 torch_flops report"
    assert page.evaluate("document.querySelector('.phases')") is None  # one phase: no tabs
    # the tree: collapse, open the root, sort its children by FLOPs, expand everything
    _click(page, ".collapse-all")  # the root stays open
    assert [r.split(" ")[0].lstrip("\u25b8\u25be") for r in _rows(page, "#tree", 0)[1:]] == children
    _click(page, "#tree tbody td.label")  # close the root
    assert _rows(page, "#tree", 0) == ["\u25b8UNet"]
    _click(page, "#tree tbody td.label")
    assert _rows(page, "#tree", 3)[0] == report.format_count(p.total_flops)  # the root's FLOPs
    _click(page, "#tree th[data-key=flops]")
    by_flops = sorted(children, key=lambda c: -modules[c].flops)
    assert [r.split(" ")[0].lstrip("\u25b8\u25be") for r in _rows(page, "#tree", 0)[1:]] == by_flops  # up_conv, down, ...
    assert page.evaluate("document.querySelector('#tree th[data-key=flops]').className") == "num desc"
    _click(page, ".expand-all")
    assert page.evaluate("document.querySelectorAll('#tree tbody tr').length") == len(modules)
    # the node table: sorted by FLOPs, then filtered
    _click(page, "#nodes th[data-key=flops]")
    flops = sorted((r.flops or 0 for r in p.records), reverse=True)
    assert _rows(page, "#nodes", 5)[:3] == [report.format_count(f) for f in flops[:3]]
    _set(page, "#nodes input.filter", "conv2d", "input")
    convs = [r for r in p.records if "conv2d" in f"{r.name} {r.target} {r.module_path} {r.module_type}".lower()]
    assert len(convs) > 5 and len(_rows(page, "#nodes", 0)) == len(convs)
    assert set(_rows(page, "#nodes", 2)) == {"Conv2d"}
    _set(page, "#nodes input.filter", "", "input")
    _set(page, "#nodes select.select-status", "zero", "change")
    zero = [r for r in p.records if r.status is Status.ZERO]
    assert set(_rows(page, "#nodes", 4)) == {"zero"} and len(_rows(page, "#nodes", 0)) == len(zero)
    # operators: most FLOPs first; the icicle, the memory curve and the roofline drawn
    assert _rows(page, "#operators", 0)[0] == next(iter(p.by_operator()))
    assert page.evaluate("document.querySelectorAll('#icicle div').length") > 10
    _set(page, "select.metric", "params", "change")
    _click(page, "#icicle div[data-path=up_conv]")
    assert page.evaluate("document.querySelector('.crumbs').textContent") == "zoom: UNet \u203a up_conv"
    assert page.evaluate("document.querySelectorAll('#memory polyline').length") == 1
    roof = _embedded(Path(path).read_text())["sections"][0]["roofline"]
    assert page.evaluate("document.querySelectorAll('#roofline circle').length") == len(roof["points"])
    assert page.errors() == []
    width, height = _png_size(page.screenshot())
    assert width == 1280 and height > 1500  # the whole page: header, tree, icicle, tables, charts


def test_training_step_report_in_chromium(training_step: torch_flops.Profile, browser: Any, tmp_path: Path) -> None:
    p = training_step
    page = browser.open(Path(p.to_html(tmp_path / "step.html")).as_uri())
    tabs = page.evaluate("[...document.querySelectorAll('.phases button')].map(b => b.textContent)")
    assert tabs == ["forward", "loss", "backward", "optimizer", "all phases"]
    root_flops = "document.querySelector('#tree tbody tr td:nth-child(4)').textContent"
    forward = sum(r.flops or 0 for r in p.records if r.phase == "forward")
    loss = sum(r.flops or 0 for r in p.records if r.phase == "loss")  # the cross entropy, outside the model
    assert loss > 0 and forward + loss == p.total_flops
    assert page.evaluate(root_flops) == report.format_count(forward)
    _click(page, ".phases button[data-view=backward]")
    backward = sum(r.backward_flops or 0 for r in p.records)
    assert page.evaluate(root_flops) == report.format_count(backward)
    _click(page, ".phases button[data-view=optimizer]")
    optimizer = sum(r.flops or 0 for r in p.records if r.phase == "optimizer")
    assert optimizer > 0 and page.evaluate(root_flops) == report.format_count(optimizer)
    # one optimizer record per parameter: two weights and two biases
    assert len(_rows(page, "#nodes", 0)) == 4 == sum(r.phase == "optimizer" for r in p.records)
    _click(page, ".phases button[data-view=all]")
    assert page.evaluate(root_flops) == report.format_count(forward + loss + backward + optimizer)
    assert page.errors() == []
    assert _png_size(page.screenshot(full_page=False)) == (1280, 900)


def test_backward_work_no_node_caused_is_in_the_page(browser: Any, tmp_path: Path) -> None:
    # two micro-batches, one step: the second backward accumulates into the .grad of the first, work no
    # forward node caused (in the profile's totals): the backward tab's root row is the profile's total
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with torch_flops.TrainingProfiler(model, opt) as profiler:
        for _ in range(2):
            model(torch.randn(4, 8)).sum().backward()
        opt.step()
        opt.zero_grad()
    p = profiler.profiles[0]
    # the accumulation: one add per gradient element, 8*16 + 16 + 16*4 + 4 = 212
    assert p.backward["unattributed_flops"] == 212
    assert p.total_backward_flops == sum(r.backward_flops or 0 for r in p.records) + 212
    page = browser.open(Path(p.to_html(tmp_path / "accumulated.html")).as_uri())
    root_flops = "document.querySelector('#tree tbody tr td:nth-child(4)').textContent"
    _click(page, ".phases button[data-view=backward]")
    assert page.evaluate(root_flops) == report.format_count(p.total_backward_flops)
    _click(page, ".phases button[data-view=all]")
    optimizer = sum(r.flops or 0 for r in p.records if r.phase == "optimizer")  # (not in total_flops)
    assert page.evaluate(root_flops) == report.format_count(p.total_flops + p.total_backward_flops + optimizer)
    _click(page, ".phases button[data-view=forward]")  # (a row of the backward's alone: not a forward node)
    assert len(_rows(page, "#nodes", 0)) == sum(r.phase == "forward" for r in p.records)
    assert optimizer > 0 and page.errors() == []


def test_unsupported_nodes_highlighted_and_untimed_columns_hidden(hand_profile: Any, browser: Any,
                                                                  tmp_path: Path) -> None:
    path = html.write_html(hand_profile(timed=False), tmp_path / "meta.html")
    page = browser.open(Path(path).as_uri())
    assert page.evaluate("[...document.querySelectorAll('#nodes tr.st-unsupported')].map(r => r.children[1]"
                         ".textContent)") == ["mystery"]
    hidden = "[...document.querySelectorAll('#tree thead th')].filter(t => getComputedStyle(t).display == 'none')"
    assert page.evaluate(f"{hidden}.map(t => t.textContent)") == ["time", "% time", "FLOP/s"]  # meta: untimed
    assert page.evaluate("document.getElementById('cold-note')") is None
    cold = html.write_html(hand_profile(), tmp_path / "cold.html")
    page = browser.open(Path(cold).as_uri())
    assert "first (cold) call" in page.evaluate("document.getElementById('cold-note').textContent")
    assert page.evaluate(f"{hidden}.length") == 0
    assert page.errors() == []


def test_sections_in_chromium(unet: TorchFLOPsByFX, hand_profile: Any, browser: Any, tmp_path: Path) -> None:
    path = tmp_path / "two.html"
    path.write_text(html.render_document([("prefill", unet.profile), ("decode step 1", hand_profile())]))
    page = browser.open(path.as_uri())
    assert page.evaluate("[...document.querySelectorAll('.sections button')].map(b => b.textContent)") == [
        "prefill", "decode step 1"]
    _click(page, ".sections button[data-section='1']")
    assert page.evaluate("[...document.querySelectorAll('h1')].filter(h => h.offsetParent).map(h => h.textContent)") \
        == ["decode step 1 \u2014 torch_flops report"]
    assert page.errors() == []


def test_an_empty_profile_draws_without_an_error(browser: Any, tmp_path: Path) -> None:
    page = browser.open(Path(html.write_html(torch_flops.Profile(records=()), tmp_path / "empty.html")).as_uri())
    assert page.evaluate("document.body.dataset.ready") == "1" and page.errors() == []
    assert page.evaluate("document.querySelector('#nodes .info').textContent") == "0 of 0 rows"


# ---------------------------------------------------------------------- a generation's report


@pytest.fixture(scope="module")
def generation() -> Any:
    hf = pytest.importorskip("transformers")
    config = hf.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, vocab_size=50, max_position_embeddings=64,
                            attn_implementation="eager")
    torch.manual_seed(0)
    model = hf.LlamaForCausalLM(config).eval()
    ids = torch.randint(1, 50, (1, 6), generator=torch.Generator().manual_seed(0))
    return torch_flops.profile_generate(model, ids, attention_mask=torch.ones_like(ids), max_new_tokens=5,
                                        min_new_tokens=5, do_sample=False, pad_token_id=0, baseline=False)


def test_generation_report_has_a_section_per_step(generation: Any, tmp_path: Path) -> None:
    gp = generation
    doc = _embedded(Path(gp.to_html(tmp_path / "gen.html", hardware="h100-sxm")).read_text())
    # 5 new tokens: the prefill (the 6 prompt tokens) and 4 decode steps fed 1 token each (the 5th token made is
    # never fed back), so the contexts are 6, 7, 8, 9, 10
    assert [s["title"] for s in doc["sections"]] == [
        "whole generation (5 steps)", "prefill (step 0, 6 tokens in, context 6)",
        *(f"decode (step {k}, 1 token in, context {6 + k})" for k in range(1, 5))]
    # the whole run holds every step's nodes (each marked with its step), then one section per step
    whole, *steps = doc["sections"]
    assert [len(s["nodes"]) for s in steps] == [len(p.records) for p in gp.profiles]
    graph = html.NODE_FIELDS.index("graph")
    assert [row[graph] for row in whole["nodes"]] == [k for k, p in enumerate(gp.profiles) for _ in p.records]
    flops = html.NODE_FIELDS.index("flops")
    assert [sum(row[flops] or 0 for row in s["nodes"]) for s in steps] == [p.total_flops for p in gp.profiles]
    assert {s["roofline"]["hardware"] for s in doc["sections"]} == {"h100-sxm"}
    # at most 2 decode steps: the first and the last; 3: decode positions k * (4 - 1) / (3 - 1) for k = 0, 1, 2:
    # 0, 1.5 -> 2 (rounded half to even), 3, i.e. steps 1, 3 and 4
    assert [t for t, _, _ in gp.html_sections(max_decode_steps=2)][2:] == [
        "decode (step 1, 1 token in, context 7)", "decode (step 4, 1 token in, context 10)"]
    assert [t.split(",")[0] for t, _, _ in gp.html_sections(max_decode_steps=3)][2:] == [
        "decode (step 1", "decode (step 3", "decode (step 4"]
    with pytest.raises(ValueError, match="max_decode_steps must be an int >= 0"):
        gp.html_sections(max_decode_steps=-1)


def test_generation_report_in_chromium(generation: Any, browser: Any, tmp_path: Path) -> None:
    page = browser.open(Path(generation.to_html(tmp_path / "gen.html")).as_uri())
    assert page.evaluate("[...document.querySelectorAll('.sections button')].length") == 6
    _click(page, ".sections button[data-section='2']")
    assert page.evaluate("[...document.querySelectorAll('h1')].filter(h => h.offsetParent).map(h => h.textContent)") \
        == ["decode (step 1, 1 token in, context 7) \u2014 torch_flops report"]
    assert page.errors() == []


# ---------------------------------------------------------------------- edge cases, every control clicked

# click every control a page offers: each section and phase tab, every option of every select, every column
# header (twice: both orders), expand/collapse, the pages of a table, a filter with HTML in it, an icicle cell
_EXERCISE = r"""(() => {
  const shown = e => e.offsetParent !== null, all = s => [...document.querySelectorAll(s)].filter(shown);
  const controls = () => {
    for (const b of all('button.expand-all, button.collapse-all, button.next, button.prev')) b.click();
    for (const s of all('select')) for (const o of [...s.options, s.options[0]]) { s.value = o.value; s.dispatchEvent(new Event('change')); }
    for (const th of all('th')) { th.click(); th.click(); }
    for (const f of all('input.filter')) for (const v of ['<b>"\\', '']) { f.value = v; f.dispatchEvent(new Event('input')); }
    const cells = all('.icicle div'); if (cells.length) cells[cells.length - 1].click();
  };
  let views = 0;
  for (const s of [...document.querySelectorAll('.sections button')].concat([null])) {
    if (s) s.click(); else if (views) break;
    const tabs = all('.phases button');
    for (const t of tabs.length ? tabs : [null]) { if (t) t.click(); controls(); views++; }
  }
  return views;
})()"""


def _exercised(browser: Any, path: str | Path) -> Any:
    """The page at ``path`` once every control was used: no error, no request but the page's own file."""
    url = Path(path).as_uri()
    page = browser.open(url)
    assert page.evaluate("document.body.dataset.ready") == "1" and page.evaluate("document.querySelector('.error')") is None
    assert page.evaluate(_EXERCISE) >= 1
    assert page.errors() == []
    assert page.requests() == [url]  # self-contained: nothing fetched, not even a favicon
    return page


def test_edge_case_pages_work_in_chromium(hand_profile: Any, browser: Any, tmp_path: Path) -> None:
    x = torch.randn(2, 8)
    meta = torch_flops.profile(nn.Sequential(nn.Linear(8, 16), nn.ReLU()).to("meta"), x.to("meta"))
    assert meta.total_flops == 576  # Linear: 2*8*16 = 256 MACs -> 2*256 + 2*16 bias = 544; ReLU: 2*16 = 32
    zero = torch_flops.profile(nn.Flatten(), torch.randn(2, 3, 4))
    assert zero.total_flops == 0
    single = torch_flops.profile(nn.Linear(3, 2), torch.randn(1, 3))
    assert single.total_flops == 14  # 1*3*2 = 6 MACs -> 2*6 + 2 bias
    hand = hand_profile()  # one unsupported node; times, memory that is None, negative, NaN and infinite below
    r = list(hand.records)
    r[1] = r[1]._replace(time_ms=float("inf"), mem_before=None, mem_after=-5)
    r[2] = r[2]._replace(time_ms=float("nan"), mem_after=None)
    odd = torch_flops.Profile(records=tuple(r), module_types=hand.module_types, module_params=hand.module_params,
                              settings={"note": float("nan")})
    for name, p in (("meta", meta), ("zero", zero), ("single", single), ("odd", odd)):
        for hardware in (None, "h100-sxm") if p is not odd else (None,):  # the hand profile has no bytes
            page = _exercised(browser, p.to_html(tmp_path / f"{name}-{hardware}.html", hardware=hardware))
            assert page.evaluate("document.querySelector('#tree tbody tr td:nth-child(4)').textContent") == \
                report.format_count(p.total_flops)
            _set(page, "#nodes select.select-plumbing", "", "change")
            assert page.evaluate("document.querySelector('#nodes .info').textContent") == \
                f"{len(p.records)} of {len(p.records)} rows"
    # a diff of two profiles whose modules and operators differ (added, removed, changed rows)
    a = torch_flops.profile(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)), x)
    b = torch_flops.profile(nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 4), nn.Softmax(-1)), x)
    d = torch_flops.diff(a, b)
    assert {r.status for r in d.rows} == {"changed", "added", "removed"}
    page = _exercised(browser, d.to_html(tmp_path / "diff.html", checks=["flops>+1%", "flops@*<-50%"]))
    assert _rows(page, "#totals", 1)[0] == report.format_count(a.total_flops) == "840"  # 544 + 32 + 264
    assert _rows(page, "#totals", 2)[0] == report.format_count(b.total_flops)
    assert page.evaluate("[...document.querySelectorAll('#gate li')].map(l => l.className)") == ["fail", "pass"]
    assert page.evaluate("document.querySelector('#diff .info').textContent") == f"{len(d.rows)} of {len(d.rows)} rows"


class _Named(nn.Module):
    """Module and buffer names with HTML and JavaScript in them (a ModuleDict key may hold anything but a dot)."""

    KEYS = ("a<b>", 'x"y', "</script><script>top['__pwned']=1</script>", "back\\slash", "\u00fcn\u00ef\u20ac\U0001f600",
            "it's", "<!--", "\u2028line")

    def __init__(self) -> None:
        super().__init__()
        self.d = nn.ModuleDict({k: nn.Linear(4, 4) for k in self.KEYS})
        self.register_buffer("b<img src=x onerror=top['__pwned']=2>", torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for m in self.d.values():
            x = m(x)
        return x + getattr(self, "b<img src=x onerror=top['__pwned']=2>")


def test_names_with_html_and_script_in_them_are_text(browser: Any, tmp_path: Path) -> None:
    p = torch_flops.profile(_Named(), torch.randn(2, 4))
    paths = list(p.by_module())
    assert paths[2:] == [f"d.{k}" for k in _Named.KEYS]
    page = _exercised(browser, p.to_html(tmp_path / "names.html", hardware="h100-sxm"))
    assert page.evaluate("top.__pwned === undefined && document.scripts.length === 2 && document.images.length === 0")
    _click(page, ".expand-all")
    assert page.evaluate("[...document.querySelectorAll('#tree tbody tr')].map(r => r.dataset.path)") == paths
    labels = page.evaluate("[...document.querySelectorAll('#tree tbody td.label')].map(td => td.textContent)")
    assert labels[2:] == [f"{k} (Linear)" for k in _Named.KEYS]
    # 4*4 = 16 MACs per row of 2 -> 2*32 + 2*4 bias = 72 FLOPs each
    assert [p.by_module()[f"d.{k}"].flops for k in _Named.KEYS] == [72] * len(_Named.KEYS)
    assert _rows(page, "#tree", 3)[2:] == ["72"] * len(_Named.KEYS)


def _non_ascii() -> tuple[torch_flops.Profile, torch_flops.ProfileDiff]:
    model = type("Mod\u00e8le\u4e00", (nn.Sequential,), {})(nn.Linear(2, 2))
    p = torch_flops.profile(model, torch.randn(1, 2))
    return p, torch_flops.diff(p, p, labels=("avant", "apr\u00e8s"))


def test_a_title_outside_ascii_leaves_the_page_ascii() -> None:
    # the file is written in the locale's encoding: a C locale (ASCII) or a Windows code page could not write
    # the title's characters, so they go in as references and the whole page is ASCII
    p, d = _non_ascii()
    page = html.render_html(p)
    assert page.isascii() and "<title>Mod&#232;le&#19968; - torch_flops report</title>" in page
    assert d.html().isascii() and "<title>torch_flops diff: avant -&gt; apr&#232;s</title>" in d.html()


def test_a_title_outside_ascii_in_chromium(browser: Any, tmp_path: Path) -> None:
    p, d = _non_ascii()
    opened = _exercised(browser, p.to_html(tmp_path / "title.html"))
    assert opened.evaluate("document.title") == "Mod\u00e8le\u4e00 - torch_flops report"
    assert opened.evaluate("document.querySelector('h1').textContent") == "Mod\u00e8le\u4e00 \u2014 torch_flops report"
    opened = _exercised(browser, d.to_html(tmp_path / "diff.html"))
    assert opened.evaluate("document.title") == "torch_flops diff: avant -> apr\u00e8s"


def _section_totals(page: Any, count: int) -> list[str]:
    """The root's FLOPs in each section's tree, opening each section in turn."""
    found = []
    for k in range(count):
        if count > 1:
            _click(page, f".sections button[data-section='{k}']")
        found.append(page.evaluate(f"document.querySelector('#tree{'-' + str(k) if k else ''} tbody tr "
                                   "td:nth-child(4)').textContent"))
    return found


def test_generation_of_one_step_and_of_more_steps_than_shown(generation: Any, browser: Any, tmp_path: Path) -> None:
    hf = pytest.importorskip("transformers")
    config = hf.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                            num_key_value_heads=2, vocab_size=50, max_position_embeddings=64,
                            attn_implementation="eager")
    torch.manual_seed(0)
    ids = torch.randint(1, 50, (1, 4), generator=torch.Generator().manual_seed(0))
    one = torch_flops.profile_generate(hf.LlamaForCausalLM(config).eval(), ids, attention_mask=torch.ones_like(ids),
                                       max_new_tokens=1, do_sample=False, pad_token_id=0, baseline=False)
    assert len(one.profiles) == 1  # the prefill alone: its token is never fed back
    page = _exercised(browser, one.to_html(tmp_path / "one.html", hardware="h100-sxm"))
    assert page.evaluate("[...document.querySelectorAll('.sections button')].map(b => b.textContent)") == [
        "whole generation (1 step)", "prefill (step 0, 4 tokens in, context 4)"]
    assert _section_totals(page, 2) == [report.format_count(one.prefill.total_flops)] * 2
    # 4 decode steps, 2 shown: the first and the last
    page = _exercised(browser, generation.to_html(tmp_path / "two.html", max_decode_steps=2))
    shown = [generation.total, generation.prefill, generation.decode[0], generation.decode[3]]
    assert _section_totals(page, 4) == [report.format_count(p.total_flops) for p in shown]


def test_numbers_are_written_as_the_text_report_writes_them(hand_profile: Any, browser: Any, tmp_path: Path) -> None:
    # exact ties, which Python's format rounds half to even and JavaScript's toFixed rounds up: 424,500 FLOPs
    # in all (424.5 K -> "424 K"), 10.25 ms (-> "10.2 ms"), 1 parameter of 800 (0.125% -> "0.12%")
    hand = hand_profile()
    r = list(hand.records)
    r[1] = r[1]._replace(flops=424_500 - (40 + 40 + 168 + 168), time_ms=10.25)
    p = torch_flops.Profile(records=tuple(r), module_types=hand.module_types,
                            module_params={**hand.module_params, "head": 1, "unused": 689}, batch_size=4)
    assert (p.total_flops, p.total_params, report.format_count(p.total_flops)) == (424_500, 800, "424 K")
    assert (report.format_time_ms(10.25), report.format_percent(1, 800)) == ("10.2 ms", "0.12%")
    page = browser.open(Path(p.to_html(tmp_path / "ties.html")).as_uri())
    _click(page, ".expand-all")
    modules, root = p.by_module(), p.by_module()[""]
    cells = page.evaluate("[...document.querySelectorAll('#tree tbody tr')].map(r => [r.dataset.path, "
                          "...[...r.children].slice(1, 8).map(c => c.textContent)])")
    assert cells == [[path, report.format_count(m.params), report.format_percent(m.params, root.params),
                      report.format_count(m.flops), report.format_percent(m.flops, root.flops),
                      report.format_count(m.macs), report.format_time_ms(m.time_ms),
                      report.format_percent(m.time_ms, root.time_ms)] for path, m in modules.items()]
    _set(page, "#nodes select.select-plumbing", "", "change")
    assert _rows(page, "#nodes", 5) == [report.format_count(x.flops) for x in p.records]
    assert _rows(page, "#nodes", 7) == [report.format_time_ms(x.time_ms) for x in p.records]
    by_op = p.by_operator()  # the operator table, most FLOPs first, its % of the total as the text's
    assert _rows(page, "#operators", 3)[0] == report.format_percent(next(iter(by_op.values())).flops, p.total_flops)
    # a sum's last bit (its order of addition) never decides a digit or a unit, on the page as in the text:
    # both read a number to 12 digits first (4.865 ms is "4.87 ms" from either side; 1000 ms is "1.00 s")
    for value in (4.864999999999999, 4.865000000000001, 999.9999999999999, 1000.0000000000001, 0.9999999999999999):
        assert page.evaluate(_numbers_js(f"time({value!r})")) == report.format_time_ms(value)
    assert [report.format_time_ms(v) for v in (4.864999999999999, 999.9999999999999)] == ["4.87 ms", "1.00 s"]
    assert page.evaluate(_numbers_js("count(999.9999999999999)")) == report.format_count(999.9999999999999) == "1.00 K"
    assert page.errors() == []


def test_a_parent_with_many_children_shows_the_first_500(rec: Any, browser: Any, tmp_path: Path) -> None:
    # 600 modules side by side (a flat Sequential of 10,000 drew every row at load: 1.1 s, and over ~120,000
    # modules the page failed with a RangeError): 500 rows, then "... and 100 more" that shows them all
    n = 600
    records = [rec(0, "x", "placeholder", "x", "", "Net", 0, 0, None, Status.ZERO),
               *(rec(i + 1, f"l{i}", "call_module", "Linear", f"l{i}", "Linear", 2 * (i + 1), i + 1, None)
                 for i in range(n)),
               rec(n + 1, "output", "output", "output", "", "Net", 0, 0, None, Status.ZERO)]
    p = torch_flops.Profile(records=tuple(records), module_types={"": "Net", **{f"l{i}": "Linear" for i in range(n)}},
                            device="meta")
    assert p.total_flops == n * (n + 1)  # 2 * (1 + ... + 600)
    page = browser.open(Path(p.to_html(tmp_path / "flat.html")).as_uri())
    count = "document.querySelectorAll('#tree tbody tr').length"
    assert page.evaluate(count) == 1 + 500 + 1  # the root, its first 500 children, the "more" row
    assert page.evaluate("document.querySelector('#tree tr.more').textContent").startswith("\u2026 and 100 more")
    _click(page, "#tree th[data-key=flops]")  # the largest first: l599 (1,200 FLOPs) down to l100 (202)
    flops = page.evaluate("[...document.querySelectorAll('#tree tbody tr:not(.more)')].map(r => r.children[3].textContent)")
    assert len(flops) == 501 and flops[1:3] == ["1.20 K", "1.20 K"] and flops[500] == "202"
    _click(page, "#tree a.show-all")
    assert page.evaluate(count) == 1 + n
    _click(page, ".collapse-all")
    _click(page, ".expand-all")
    assert page.evaluate(count) == len(p.by_module()) == 1 + n
    assert _rows(page, "#tree", 3)[0] == report.format_count(p.total_flops) == "361 K"  # 600 * 601 = 360,600
    assert page.errors() == []


def _numbers_js(expression: str) -> str:
    """``expression`` evaluated with the page's number formats (the section of its script that
    writes numbers as torch_flops.report does) in scope."""
    from torch_flops.html import _JS

    section = _JS.split("numbers, as torch_flops.report writes them")[1].split("\n// ----")[0]
    return f"(() => {{ {section}\n return {expression}; }})()"
