"""The HTML report of a large profile in a real browser: the Llama-2-70B shape (80 layers, meta,
1 x 2048 tokens, bf16, the default front end, the roofline on h100-sxm) written with
``torch_flops.html``, its file size, and its load time in headless Chromium: from navigation start
to the load event (the page draws itself in a script at the end of the body, so the load event
comes after the first drawing) and the script's own drawing time, median of 5 fresh tabs. Then one
interaction each: sort the node table by FLOPs, filter it, expand the whole module tree.

    python benchmarks/bench_html.py                 # target: loaded in under 2 s
    python benchmarks/bench_html.py --screenshot docs/report.png   # also the README's picture

The screenshot is of ResNet-50's report (CPU, batch 1, one warm-up call, the median of 5, the roofline on
h100-sxm): the top of the page at 1280 x 1000. Needs Chromium (Debian: apt-get install chromium).
Prints, never asserts.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from torch_flops import TorchFLOPsByFX, zoo

_spec = importlib.util.spec_from_file_location("chromium", Path(__file__).parent.parent / "tests" / "_chromium.py")
chromium = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(chromium)  # type: ignore[union-attr]


def llama70b_html(path: str) -> tuple[int, float, float]:
    """(nodes, profile s, render s) of the 70B report written to ``path``."""
    start = time.perf_counter()
    with torch.device("meta"):
        model = zoo.llama(zoo.llama2_70b_config()).to(torch.bfloat16).eval()
    (ids,) = zoo.llama_example_inputs(batch_size=1, device="meta", seq_len=2048)
    counter = TorchFLOPsByFX(model)
    counter.propagate(ids)
    nodes = len(counter.records)
    profiled = time.perf_counter()
    counter.to_html(path, hardware="h100-sxm")
    return nodes, profiled - start, time.perf_counter() - profiled


def measure(browser: chromium.Browser, url: str) -> tuple[float, float]:
    page = browser.open(url)
    load = page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd")
    render = float(page.evaluate("document.body.dataset.renderMs"))
    errors = page.errors()
    if errors:
        print("console errors:", errors)
    browser.send("Target.closeTarget", {"targetId": browser.send("Target.getTargets")["targetInfos"][0]["targetId"]})
    return load, render


def interactions(browser: chromium.Browser, url: str) -> list[tuple[str, float]]:
    page = browser.open(url)
    timed = []
    for name, script in (
            ("sort the nodes by FLOPs", "document.querySelector('#nodes th[data-key=flops]').click()"),
            ("filter the nodes ('mlp')", ("{ const i = document.querySelector('#nodes input.filter'); i.value = 'mlp';"
                                          " i.dispatchEvent(new Event('input')); }")),
            ("expand the whole module tree", "document.querySelector('.expand-all').click()"),
            ("switch the icicle to params", ("{ const s = document.querySelector('select.metric'); s.value = 'params';"
                                             " s.dispatchEvent(new Event('change')); }"))):
        ms = page.evaluate(f"(() => {{ const t = performance.now(); {script}; return performance.now() - t; }})()")
        timed.append((name, ms))
    rows = page.evaluate("document.querySelectorAll('#tree tbody tr').length")
    timed.append((f"(the expanded tree has {rows} rows)", 0.0))
    return timed


def screenshot(browser: chromium.Browser, path: str) -> None:
    model = zoo.resnet50().eval()
    counter = TorchFLOPsByFX(model, warmup=1, repeat=5)
    with torch.no_grad():
        counter.propagate(torch.randn(1, 3, 224, 224))
    with tempfile.TemporaryDirectory() as directory:
        html = os.path.join(directory, "resnet50.html")
        counter.to_html(html, hardware="h100-sxm")
        page = browser.open(Path(html).as_uri(), width=1280, height=1000)
        page.evaluate("document.querySelector('#tree th[data-key=flops]').click()")
        png = page.screenshot(full_page=False)
    Path(path).write_bytes(png)
    print(f"wrote {path} ({len(png) / 1024:.0f} KiB)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--screenshot", metavar="PNG", help="also write ResNet-50's report's picture here")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    executable = chromium.find_chromium()
    if executable is None:
        sys.exit("no Chromium here (Debian: apt-get install chromium)")
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "llama70b.html")
        nodes, profile_s, render_s = llama70b_html(path)
        size = os.path.getsize(path)
        print(f"Llama-2-70B shape, meta, 1 x 2048 tokens, bf16: {nodes} nodes; profile {profile_s:.2f} s, "
              f"HTML written in {render_s:.2f} s, {size / 1e6:.2f} MB")
        with chromium.Browser(executable) as browser:
            url = Path(path).as_uri()
            results = [measure(browser, url) for _ in range(args.runs)]
            load = statistics.median(r[0] for r in results)
            draw = statistics.median(r[1] for r in results)
            print(f"headless Chromium, median of {args.runs} fresh tabs: load event at {load:.0f} ms after "
                  f"navigation start (target < 2000 ms), of which the script's drawing {draw:.0f} ms")
            for name, ms in interactions(browser, url):
                print(f"  {name}: {ms:.0f} ms" if ms else f"  {name}")
            if args.screenshot:
                screenshot(browser, args.screenshot)


if __name__ == "__main__":
    main()
