"""`effbench selftest`: the CLI contract (table, selftest.json, exit codes) with injected checks, the
references it trusts checked by hand, and the whole CPU selftest once (slow)."""

from __future__ import annotations

import json
import math
import time

import pytest
import torch
from clitools import invoke, only_run

from effbench.selftest import checks as st
from effbench.selftest.probe import Probe
from effbench.selftest.reference import BareLoop, depthwise_net, layer_flops
from effbench.results import record_of

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _fake_checks(fail: bool):
    def good(ctx):
        return [st.Check("good", st.PASS, 1.0, 1.0, "1%", "agrees"), st.Check("gpu thing", st.SKIP, reason="no CUDA")]

    def bad(ctx):
        return [st.Check("bad", st.FAIL if fail else st.PASS, 2.0, 1.0, "1%", "off by 2x")]

    def broken(ctx):
        raise RuntimeError("the collective hung\nsecond line")

    return {"good": good, "bad": bad, **({"broken": broken} if fail else {})}


@pytest.mark.parametrize("fail", [False, True])
def test_cli_prints_the_table_writes_selftest_json_and_exits_1_on_a_fail(fail, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(st, "CHECKS", _fake_checks(fail))
    code, out, err = invoke(["selftest", "--device", "cpu", "--output", tmp_path], capsys)
    assert code == (1 if fail else 0), err
    header = next(line for line in out.splitlines() if line.startswith("check"))
    assert header.split() == ["check", "status", "measured", "reference", "tolerance", "reason"]
    assert "SKIP" in out and "no CUDA" in out
    doc = json.loads((only_run(tmp_path) / "selftest.json").read_text())
    assert set(doc) >= {"checks", "env"} and doc["env"]["torch"] == torch.__version__
    for c in doc["checks"]:
        assert set(c) == {"name", "status", "measured", "reference", "tolerance", "reason"}
    statuses = {c["name"]: c["status"] for c in doc["checks"]}
    if fail:  # a check that raises is one FAIL row naming the exception; the others still ran
        assert statuses == {"good": "PASS", "gpu thing": "SKIP", "bad": "FAIL", "broken": "FAIL"}
        assert doc["checks"][-1]["reason"] == "RuntimeError: the collective hung"
    else:
        assert statuses == {"good": "PASS", "gpu thing": "SKIP", "bad": "PASS"}


def test_only_runs_the_named_checks(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(st, "CHECKS", _fake_checks(True))
    code, out, _ = invoke(["selftest", "--device", "cpu", "--output", tmp_path, "--only", "good"], capsys)
    assert code == 0 and "bad" not in out


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--device", "tpu"], "--device"),
        (["--pairs", "0"], "--pairs"),
        (["--pairs", "119"], "--pairs"),
        # --only that selects nothing ran no check and exited 0; an empty item ran them all; a name twice
        (["--only", "goood"], "--only: 'goood' names no check; did you mean good?"),
        (["--only", "flops"], "--only"),
        (["--only", ","], "--only: ',' has an empty item"),
        (["--only", ""], "--only"),
        (["--only", "good,,bad"], "--only"),
        (["--only", "good,good"], "--only: lists good twice"),
        (["--data-loaders", "fast"], "--data-loaders"),
        (["--data-loaders", "fast,fast"], "--data-loaders"),
        (["--data-loaders", "fast,synthetic"], "--data-loaders"),
    ]
    + ([] if torch.cuda.is_available() else [(["--device", "cuda"], "--device")]),
)
def test_bad_options_are_one_line_exit_2(args, option, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(st, "CHECKS", _fake_checks(False))
    code, out, err = invoke(["selftest", "--output", tmp_path, *args], capsys)
    assert code == 2 and err.startswith(f"error: {option}") and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())  # no folder for a bad input


def test_per_layer_reference_matches_a_hand_count():
    # conv 3->4 3x3 on 4x4 (pad 1): fwd 2*16*4*27 = 3456, weight grad only (input needs no grad);
    # depthwise 4->4 g=4 3x3: fwd 2*16*4*9 = 1152, weight + input grads; linear 64->5: fwd 640 + 2 grads
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(4, 4, 3, padding=1, groups=4),
        torch.nn.Flatten(), torch.nn.Linear(64, 5),
    )  # fmt: skip
    step, fwd = layer_flops(model, torch.randn(2, 3, 4, 4), torch.tensor([0, 1]))
    assert fwd == 3456 + 1152 + 640
    assert step == 2 * 3456 + 3 * 1152 + 3 * 640


def test_flops_check_passes_and_would_see_the_stock_counter(monkeypatch, tmp_path):
    ctx = st.Context(st.SelftestConfig(device="cpu", output=tmp_path), torch.device("cpu"), tmp_path, print)
    assert [c.status for c in st.check_flops(ctx)] == [st.PASS, st.PASS]
    import effbench.measure.flops as flops

    monkeypatch.setattr(flops, "step_flop_mapping", dict)  # torch's own conv backward formula again
    assert [c.status for c in st.check_flops(ctx)] == [st.FAIL, st.PASS]  # depthwise wrong, ResNet right


def test_roofs_check_passes_and_would_see_a_roof_off_by_3x(monkeypatch, tmp_path):
    from effbench.measure import roofs

    monkeypatch.setattr(roofs, "CPU_MATMUL_N", 768)  # quicker; still past the sizes that fit in L2
    monkeypatch.setattr(roofs, "CPU_COPY_BYTES", 48 * 2**20)
    ctx = st.Context(st.SelftestConfig(device="cpu", output=tmp_path), torch.device("cpu"), tmp_path, print)
    rows = st.check_roofs(ctx)
    assert [c.name for c in rows] == ["roofs: fp32 matmul", "roofs: memory bandwidth"]
    assert [c.status for c in rows] == [st.PASS, st.PASS], [c.reference for c in rows]
    real = roofs.matmul_tflops
    monkeypatch.setattr(st, "ROOF_ATTEMPTS", 1)
    monkeypatch.setattr(roofs, "CPU_COPY_BYTES", 4 * 2**20)  # the memory row is not what this part checks
    monkeypatch.setattr(roofs, "matmul_tflops", lambda *a, **k: (real(*a, **k)[0] * 3, "inflated"))
    assert st.check_roofs(ctx)[0].status == st.FAIL  # the plain matmul reaches a third of the roof


def test_probe_sees_the_autocast_dtype_and_one_interval_per_step():
    model = depthwise_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(2, 3, 16, 16), torch.tensor([0, 1])
    probe = Probe().install()
    try:
        with torch.no_grad():
            model(x)  # validation: not a training forward
        for _ in range(3):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
    finally:
        probe.remove()
    assert probe.dtypes == {"bfloat16": 3 * 7}  # 6 convs + 1 linear per forward
    assert len(probe.step_times_s()) == 3 and all(t > 0 for t in probe.step_times_s())
    assert st.precision_row("p", "bf16", [probe.dtypes]).status == st.PASS
    assert st.precision_row("p", "fp16", [probe.dtypes]).status == st.FAIL
    assert st.precision_row("p", "bf16", [probe.dtypes, {}]).status == st.FAIL  # a rank that saw nothing


def test_bare_loop_times_one_step_by_the_wall_clock():
    clock = iter([10.0, 10.5])  # the step took 0.5 s by the clock around it: 4 images / 0.5 s
    loop = BareLoop(depthwise_net(), batch=4, image_size=16, classes=10, device=torch.device("cpu"),
                    now=lambda: next(clock))  # fmt: skip
    params = [p.detach().clone() for p in loop.model.parameters()]
    assert loop.timed_step_img_s() == 8.0
    assert BareLoop.__init__.__kwdefaults__["now"] is time.perf_counter  # the wall clock unless a test gives one
    assert any(not torch.equal(a, b) for a, b in zip(params, loop.model.parameters(), strict=True))  # it trained


class _FakeLoop:
    def __init__(self, order):
        self.order = order

    def step(self):
        self.order.append("b-warm")

    def timed_step_img_s(self):
        self.order.append("B")
        return float(len(self.order))


def test_interleave_runs_h_b_b_h_over_the_measured_steps():
    order = []
    gap = st.Interleave(_FakeLoop(order), warmup=2)
    for _ in range(2 + 6):  # the harness's 2 warm-up and 6 measured steps, each followed by its call
        order.append("H")
        gap()
    assert "".join(o[0] for o in order) == "HbHb" + "HBBH" + "HBBH" + "HBBH"
    assert len(gap.bare_img_s) == 6 and len(gap.calls) == 8


def test_interleave_charges_the_gaps_and_side_threads_to_the_harness():
    gap = st.Interleave(_FakeLoop([]), warmup=1)
    # call after warm-up step 0, then after measured steps 1 and 2: harness periods 1.0 s and 2.0 s
    # between calls; from the first call to the last, the side threads' CPU grew 0.06 s in 3.3 s
    gap.calls = [st._Call(0.0, 0.2, 0.5), st._Call(1.2, 1.3, 0.52), st._Call(3.3, 3.4, 0.56)]
    assert gap.untimed_share([0.99, 1.97]) == pytest.approx(1 - 2.96 / 3.0)
    assert gap.side_threads_cores() == pytest.approx(0.06 / 3.3)
    with pytest.raises(RuntimeError, match="2 harness steps between calls, 3 in steps.csv"):
        gap.untimed_share([1.0, 1.0, 1.0])


def test_the_harness_row_splits_its_median_step_into_data_and_compute_beside_the_bare_step():
    steps = [(8, 0.001, 0.010), (8, 0.002, 0.012), (8, 0.003, 0.011)]  # (images, data s, compute s)
    got = st.step_split(steps, [800.0, 640.0, 1000.0], 8)  # bare median 800 img/s: 10 ms a step
    assert got == "median step: harness 2.000 ms data + 11.000 ms compute, bare 10.000 ms"


def test_side_threads_are_the_python_threads_not_torchs_pools_and_an_ended_one_keeps_its_time():
    """On CUDA autograd's device thread ran every backward, the bare loop's too, and was charged to the harness
    (0.43 cores on the first GPU run). The CPU shows the same with torch's intra-op pool: its threads are not
    the harness's, a Python thread is, and a thread that ends inside the span (a loader's pin-memory thread at an
    epoch's end) still counts the CPU it used."""
    import threading
    import time

    import torch

    side = st.SideThreads()
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        a = torch.randn(512, 512)
        before, proc0, main0 = side.total_s(), time.process_time(), time.thread_time()
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 0.5:
            a @ a  # noqa: B018 - work for the intra-op pool
        pool_cpu = (time.process_time() - proc0) - (time.thread_time() - main0)
        assert side.total_s() - before < 0.05 < pool_cpu  # the pool worked, and is not counted
    finally:
        torch.set_num_threads(threads)
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    worker = threading.Thread(target=spin)
    before = side.total_s()
    worker.start()
    time.sleep(0.4)
    during = side.total_s() - before
    stop.set()
    worker.join()
    assert during > 0.1  # a spinning Python thread (the GIL shares it with this sleeping one)
    assert side.total_s() - before >= during  # ended, it keeps what it used


def _blocks(centres):
    """120 pair ratios, 20 a block, scattered +-2% around each block's centre (symmetric: the centre is theirs)."""
    return [c * (1 + 0.02 * (i - 9.5) / 9.5) for c in centres for i in range(20)]


@pytest.mark.parametrize(
    ("ratios", "extra", "status"),
    [
        # every block centred 0.99..1.01: PASS
        (_blocks([0.99, 1.0, 1.01, 1.0, 0.995, 1.005]), 0.0, st.PASS),
        # the same, but the harness's side costs take 2.5%: 0.99..1.01 x 0.975 straddles 0.97, no verdict
        (_blocks([0.99, 1.0, 1.01, 1.0, 0.995, 1.005]), 0.025, st.SKIP),
        # 10% slower in every block: FAIL
        (_blocks([0.9, 0.89, 0.91, 0.9, 0.9, 0.905]), 0.0, st.FAIL),
        # blocks from 0.95 to 1.02: the interval straddles 0.97, no verdict
        (_blocks([0.95, 0.96, 0.99, 1.0, 1.01, 1.02]), 0.0, st.SKIP),
        # one wild block among six: with 6 blocks the interval spans them all, no verdict (more --pairs outvote it)
        (_blocks([1.0, 1.0, 0.5, 1.0, 1.0, 1.0]), 0.0, st.SKIP),
        # 100 pairs: 5 blocks, no 95% signed-rank interval exists
        (_blocks([1.0] * 5), 0.0, st.SKIP),
    ],
)
def test_interleaved_pairs_are_judged_by_the_interval_over_blocks_of_pairs(ratios, extra, status):
    bare = [100.0 + 0.5 * i for i in range(len(ratios))]  # the machine drifts; each pair shares its moment
    harness = [r * b for r, b in zip(ratios, bare, strict=True)]
    got, ratio, low, high, why = st.compare_interleaved_steps(harness, bare, min_ratio=0.97, extra_cost_share=extra)
    assert got == status, why
    if len(ratios) == 120:
        # written apart: each block's centre is the median of its 210 Walsh averages of log ratios; over 6
        # blocks the two-sided 5% signed-rank critical value is 0, so the interval runs from the smallest
        # Walsh average of the block centres to the largest: the lowest and the highest centre
        def walsh_median(xs):
            w = sorted((a + b) / 2 for i, a in enumerate(xs) for b in xs[i:])
            return (w[len(w) // 2 - 1] + w[len(w) // 2]) / 2 if len(w) % 2 == 0 else w[len(w) // 2]

        logs = [math.log(r) for r in ratios]
        centres = [walsh_median(logs[i : i + 20]) for i in range(0, 120, 20)]
        keep = 1 - extra
        assert low == pytest.approx(math.exp(min(centres)) * keep)
        assert high == pytest.approx(math.exp(max(centres)) * keep)
        assert ratio == pytest.approx(math.exp(walsh_median(centres)) * keep)
    if got == st.SKIP:
        assert "rerun" in why or "too few" in why


def test_the_harness_calls_between_steps_after_each_step_and_outside_its_timers(tmp_path):
    """A call that sleeps 1.5 s after each step: called once per step (warm-up included), and no timed step
    holds it (a tiny 16 px step takes milliseconds; one holding the sleep would take >= 1.5 s)."""
    from effbench.run.train import between_steps

    ctx = st.Context(st.SelftestConfig(device="cpu", output=tmp_path), torch.device("cpu"), tmp_path, print)
    calls = []

    def slow_gap():
        calls.append(1)
        time.sleep(1.5)

    with between_steps(slow_gap):
        res = st.harness(ctx, **st.TINY_RUN)
    steps = st.measured_steps(res.run_dir / "steps.csv")
    assert len(calls) == st.TINY_RUN["max_steps"] and len(steps) == st.TINY_RUN["max_steps"] - 1
    assert all(d + c < 1.5 for _, d, c in steps), steps
    st.harness(ctx, **st.TINY_RUN)  # outside the block: no more calls
    assert len(calls) == st.TINY_RUN["max_steps"]


@pytest.mark.parametrize(
    ("measured", "reference", "status"),
    [
        # as fast as the loop, contention slowing some steps of both, best rounds 0.1-0.2% apart: PASS
        ([[100, 60, 99.5], [70, 99.9]], [[80, 100.0], [99.8, 50]], st.PASS),
        # 10% slower in every step, reproduced: FAIL, whatever the noise on the slow steps
        ([[90, 40], [89.5, 60]], [[100, 30], [99.5, 70]], st.FAIL),
        # 1.0 measured, but the reference's best is 10% off its next round: could be 0.9..1.0, no verdict
        ([[100], [99.9]], [[100], [90, 70]], st.SKIP),
        # 0.9 measured, but the measured side's best is 10% off its next: could be 0.9..1.0, no verdict
        ([[90], [81]], [[100], [99.9]], st.SKIP),
        # noisy on both sides, yet clearly faster (1.3 x (1 - 0.1) >= 0.97): PASS
        ([[130], [100]], [[100], [90]], st.PASS),
        # one round only: nothing reproduced
        ([[100, 99]], [[100], [99]], st.SKIP),
    ],
)
def test_fastest_steps_are_judged_only_outside_the_machines_own_scatter(measured, reference, status):
    got, ratio, best_m, best_r, why = st.compare_fastest_steps(measured, reference, min_ratio=0.97)
    assert got == status, why
    if len(measured) > 1:
        # written apart: best over all steps of each side, and each side's gap to its next-best round
        def best_and_gap(rounds):
            per_round = sorted((max(r) for r in rounds), reverse=True)
            return per_round[0], (per_round[0] - per_round[1]) / per_round[0]

        (bm, gm), (br, gr) = best_and_gap(measured), best_and_gap(reference)
        assert (best_m, best_r) == (bm, br) and ratio == pytest.approx(bm / br)
        lo, hi = bm / br * (1 - gr), bm / br / (1 - gm)
        assert got == (st.PASS if lo >= 0.97 else st.FAIL if hi < 0.97 else st.SKIP)
    if got == st.SKIP:
        assert "rerun" in why or "fewer than 2 rounds" in why


def test_measured_steps_reads_measured_steps_only(tmp_path):
    path = tmp_path / "steps.csv"
    path.write_text(
        "epoch,step,warmup,images,loss,top1,data_time_s,compute_time_s\n"
        "1,1,True,16,2.3,0.1,0.5,0.5\n"
        "1,2,False,16,2.2,0.1,0.1,0.3\n"
        "1,3,False,8,2.1,0.1,0.0,0.1\n"
    )
    assert st.measured_steps(path) == [(16, 0.1, 0.3), (8, 0.0, 0.1)]


class _Bundle:
    """A DataBundle's iteration surface: `per_epoch` batches of `batch` images, set_epoch recorded."""

    def __init__(self, per_epoch: int, batch: int = 4) -> None:
        self.epochs: list[int] = []
        self._batches = [(torch.zeros(batch, 3, 2, 2), torch.zeros(batch, dtype=torch.long))] * per_epoch

    def set_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)

    @property
    def train(self):
        return self._batches


def _ticking_clock():
    """A DeviceClock whose every read is one second after the last, and which counts its waits."""
    from effbench.run.timing import DeviceClock

    ticks = iter(range(10**6))
    waits = []
    return DeviceClock(now=lambda: float(next(ticks)), sync_stream=lambda: waits.append("stream")), waits


def test_loader_turns_time_each_batch_as_the_loop_does_and_roll_over_epochs():
    """Each batch is the loop's data span (two clock reads, one stream wait); an epoch's iterator costs its first
    batch two more reads, and the exhausted next() before it one more, as a run charges them."""
    clock, waits = _ticking_clock()
    bundle = _Bundle(per_epoch=2)
    turns = st.LoaderTurns(bundle, clock, torch.device("cpu"))
    got = [turns.batch_img_s() for _ in range(5)]
    # epoch 0: iterator (1 s) + batch (1 s), batch (1 s); epoch 1: the end (1 s) + iterator (1 s) + batch (1 s), ...
    assert got == [4 / 2, 4 / 1, 4 / 3, 4 / 1, 4 / 3]
    assert bundle.epochs == [0, 1, 2] and turns.epoch == 2
    assert len(waits) == 5  # one stream wait per delivered batch: none for the exhausted next()


def test_interleaved_batches_alternate_which_loader_goes_first_and_skip_the_warmup():
    order: list[str] = []

    class Side:
        def __init__(self, name: str) -> None:
            self.name, self.n = name, 0

        def batch_img_s(self) -> float:
            self.n += 1
            order.append(self.name)
            return float(self.n)

    a, b = Side("a"), Side("b")
    got_a, got_b = st.interleaved_batches(a, b, pairs=4, warmup=2)
    assert order == ["a", "b"] * 2 + ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert got_a == [3.0, 4.0, 5.0, 6.0] and got_b == [3.0, 4.0, 5.0, 6.0]


def test_a_data_path_skip_says_only_what_a_rerun_can_change():
    """The data check's pair count is fixed: its inconclusive verdict must not point at --pairs (the harness's)."""
    noisy_m = [1.0 + 0.5 * ((i * 7919) % 13 - 6) / 6 for i in range(120)]
    centre = st.compare_interleaved_steps(noisy_m, [1.0] * 120, min_ratio=0.0)[1]
    status, *_, why = st.compare_interleaved_steps(noisy_m, [1.0] * 120, min_ratio=centre, rerun="rerun it idle")
    assert status == st.SKIP and why.endswith("too noisy now, rerun it idle"), why


@pytest.mark.slow
def test_the_whole_cpu_selftest_passes(tmp_path, capsys):
    code, out, err = invoke(["selftest", "--device", "cpu", "--output", tmp_path], capsys)
    doc = json.loads((only_run(tmp_path) / "selftest.json").read_text())
    statuses = {c["name"]: c["status"] for c in doc["checks"]}
    assert code == 0, out + err
    from effbench.selftest.checks import GPU_ONLY

    assert {s for n, s in statuses.items() if n.startswith(GPU_ONLY)} == {"SKIP"}
    assert {n: s for n, s in statuses.items() if not n.startswith(GPU_ONLY) and s != "PASS"} == {}


@pytest.mark.gpu
@gpu
def test_gpu_checks_pass(tmp_path, capsys):
    code, out, err = invoke(
        ["selftest", "--device", "cuda", "--output", tmp_path, "--only", "precision,nvml,dp,ddp"], capsys
    )
    doc = json.loads((only_run(tmp_path) / "selftest.json").read_text())
    assert code == 0, out + err
    assert {c["name"]: c["status"] for c in doc["checks"]}["timing vs CUDA events"] == "PASS"


def test_allreduce_meets_under_a_relative_output_folder(tmp_path, monkeypatch):
    """CI runs `effbench selftest --output results`: the ranks' file:// rendezvous must not read "results" as a host."""
    from effbench.selftest.reference import allreduce_busbw_gb_s

    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    res = allreduce_busbw_gb_s("results", backend="gloo", numel=16, iters=2)
    assert res["correct"] and res["busbw_gb_s"] > 0


@pytest.mark.parametrize(
    ("device", "overrides", "gpus"),
    [("cuda", {}, 1), ("cuda", {"gpus": 2, "strategy": "dp"}, 2), ("cuda", {"device": "cpu", "nproc": 2}, None),
     ("cpu", {}, None)],
)  # fmt: skip
def test_selftest_runs_take_one_gpu_unless_a_check_asks_for_more(device, overrides, gpus, tmp_path, monkeypatch):
    """On a 4-GPU machine a run without --gpus takes all 4 under torchrun: the in-process checks (harness vs
    bare loop, precision, timing, NVML) must run on one GPU in this process."""
    from effbench.run import launch

    seen = {}

    def fake_run(cfg, **_kw):
        seen["cfg"] = cfg
        return launch.RunOutcome(tmp_path, record_of({"schema_version": 1, "status": "ok"}))

    monkeypatch.setattr(launch, "run", fake_run)
    ctx = st.Context(st.SelftestConfig(device=device, output=tmp_path), torch.device(device), tmp_path, print)
    st.harness(ctx, **overrides)
    assert seen["cfg"].gpus == gpus


@pytest.mark.dali
def test_the_data_path_check_compares_the_two_loaders_named(tmp_path, capsys):
    pytest.importorskip("nvidia.dali")
    code, out, err = invoke(["selftest", "--device", "cpu", "--output", tmp_path, "--only", "data",
                             "--data-loaders", "dali,fast"], capsys)  # fmt: skip
    assert code == 0, out + err
    (check,) = json.loads((only_run(tmp_path) / "selftest.json").read_text())["checks"]
    assert check["name"] == "data path: dali vs fast loader" and check["status"] == "PASS", check
    # the same recipe, recorded by both runs, and no goal on the ratio of a pair other than the default
    assert "same images, same recipe" in check["tolerance"] and "random crop 32" in check["reason"]


@pytest.mark.parametrize("columns", [80, 200])
def test_the_table_fits_the_terminal_and_a_summary_line_ends_it(columns, tmp_path, capsys, monkeypatch):
    """issue 34: the table was 160-250 columns wide; now it fits 100 columns, or $COLUMNS when wider (columns left
    out are named, selftest.json keeps them; issue 47: a pipe or a narrower terminal gets 100, as every report),
    and the last line counts the statuses, as doctor's does."""
    long = "a reason long enough to wrap: " + "the interval of the ratio over thirty blocks of pairs " * 3

    def rows(ctx):
        return [st.Check("harness vs bare loop, median-step img/s", st.PASS, 1.0123, 1.0, ">= 0.97", long),
                st.Check("gpu thing", st.SKIP, reason="no CUDA"), st.Check("bad", st.FAIL, 2.0, 1.0, "1%", "off")]  # fmt: skip

    monkeypatch.setattr(st, "CHECKS", {"all": rows})
    monkeypatch.setenv("COLUMNS", str(columns))
    code, out, err = invoke(["selftest", "--device", "cpu", "--output", tmp_path], capsys)
    assert code == 1, err
    lines = out.rstrip("\n").splitlines()
    assert lines[-1] == "selftest: 1 PASS, 1 SKIP, 1 FAIL"
    start = lines.index(next(line for line in lines if line.startswith("check")))
    table = lines[start : lines.index("", start)]  # up to the blank line under it (then the folder's path)
    width = max(100, columns)
    assert max(len(line) for line in table) <= width, "\n".join(table)
    header = table[0].split()
    if columns == 80:  # 100 columns: the least needed columns go first; the reason still reads whole, wrapped
        assert "reference" not in header and "tolerance" not in header and "reason" in header
        assert "tolerance and reference left out to fit 100 columns: selftest.json has them" in out
    else:
        assert header == ["check", "status", "measured", "reference", "tolerance", "reason"]
        assert "left out" not in out
    words = " ".join(line.split("  ")[-1].strip() for line in table)  # the reason column's lines, joined
    assert "thirty blocks of pairs" in words.replace("  ", " ")


@pytest.mark.parametrize(
    ("ratio", "attained", "datasheet", "status"),
    [
        (1.0, 400.0, None, st.PASS),  # a CPU: no datasheet, the reference agrees
        (0.4, 400.0, None, st.FAIL),  # the plain matmul far below the roof: the roof is not what the device attains
        (1.6, 400.0, None, st.FAIL),  # far above it: the roof is too low
        (1.0, 0.0, None, st.FAIL),  # no roof at all
        (1.0, 700.0, 989.0, st.PASS),  # an H100's bf16 matmul at ~71% of its dense datasheet peak
        (1.0, 200.0, 989.0, st.FAIL),  # 20% of the datasheet: the roof misses most of the device
        (1.0, 1100.0, 989.0, st.FAIL),  # above the datasheet: a timer that missed work
    ],
)
def test_a_roof_passes_only_beside_its_reference_and_inside_its_datasheet(ratio, attained, datasheet, status):
    row = st._roof_row("roofs: bf16 matmul", "x", attained, datasheet, "TFLOP/s", "ref", ratio, "how")
    assert row.status == status, row
    # written apart: the bounds of docs/selftest.md (0.5..1.5x the reference, 0.3..1.05x the datasheet)
    assert ("datasheet 0.3..1.05x" in row.tolerance) == bool(datasheet) and row.tolerance.startswith("0.5..1.5x")
    if datasheet:
        assert f"{attained / datasheet:.0%} of the datasheet's {datasheet:g} TFLOP/s" in row.reason
