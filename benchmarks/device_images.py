"""One prepared script for a lent GPU (issue 49, part 4): DP-MEPF at its paper's MNIST schedule, then the default
image recipe's fit time; the samples come back as uint8 ``.npz`` and are scored on the CPU afterwards.

On the GPU machine (every phase has a wall-clock cap, so the script ends inside ``--deadline`` seconds):

    python benchmarks/device_images.py run --out $OUT --encoder runs/enc/fmnist_vgg_small.safetensors \
        --deadline 420

- ``ntk``: ``mmdsynth fit --method dp-ntk --dataset mnist --epsilon 1`` exactly as a user runs it (the default
  image recipe), timed alone; 6,000 balanced samples of it saved.
- ``mepf``: DP-MEPF on MNIST at the paper's schedule (Table 7/8: 100,000 iterations of batch 100, generator lr
  1e-5, moving-average lr 1e-4, generator Adam beta1 0.5, no lr decay, the proxy scored every 5,000
  iterations), one worker per ``--mepf-epsilon`` in parallel on the one GPU. The release is made once; the
  second 500 of the first 1,000 iterations measure the step time; the run then resumes up to the most iterations (a multiple of 5,000, at most
  100,000) that fit before the deadline. The row says how many it reached. 6,000 samples of the selected and of
  the final checkpoint are saved.

- ``levers``: issue 49's quality levers on MNIST at eps 1 (seed 0), each scored on the device by
  ``image_utility.py --cnn``: LogReg / MLP on 6,000 samples and the fixed ConvNet protocol on 60,000 samples (width
  128, 50 epochs; ``--lever-cnn-seeds`` training seeds, 1 for a screen). All variants run in parallel on the one GPU,
  each capped by the deadline; rows in ``levers.jsonl``, one sample grid per variant, the logs in ``levers.log``:

    python benchmarks/device_images.py run --out $OUT --phases levers --deadline 420

Back on the CPU, score what came back (LogReg / MLP on 6,000 samples, the DP-NTK Table 2 protocol):

    python benchmarks/device_images.py score DIR --out benchmarks/out/device_images.jsonl
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _rows import emit

PAPER = {"iterations": 100_000, "batch_size": 100, "lr": 1e-5, "mavg_lr": 1e-4, "beta1": 0.5, "lr_decay": 1.0,
         "select_every": 5_000}


def to_uint8(x) -> np.ndarray:
    """Samples in [0, 1] as uint8 (the real images' own precision): 6,000 MNIST images compress to about 2 MB,
    under the 16 MiB a file the device machine sends back."""
    return np.clip(np.rint(np.asarray(x, np.float32) * 255), 0, 255).astype(np.uint8)


def log_row(out: Path, row: dict) -> None:
    emit(row, out / "results.jsonl")


def mepf_name(epsilon: float) -> str:
    """The DP-MEPF worker's name at ``epsilon``: its work folder, log and samples file."""
    return f"mepf_e{epsilon:g}"


def env_row() -> dict:
    import torch
    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    return {"phase": "env", "torch": torch.__version__, "device": dev, "python": sys.version.split()[0],
            "cpus": os.cpu_count()}


def phase_ntk(out: Path, work: Path, cap_s: float, epsilon: float, extra: list[str]) -> None:
    """The default image recipe, as a user runs it, timed alone (``extra``: options for a CPU smoke test only)."""
    model_dir = work / "ntk"
    cmd = [sys.executable, "-m", "mmdsynth.cli", "fit", "--method", "dp-ntk", "--dataset", "mnist",
           "--epsilon", str(epsilon), "--out", str(model_dir), *extra]
    t = time.perf_counter()
    with open(out / "ntk.log", "w") as fh:
        try:
            rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=cap_s).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    wall = time.perf_counter() - t
    row = {"phase": "ntk", "command": " ".join(["mmdsynth", *cmd[3:]]),
           "rc": rc, "wall_s": round(wall, 1)}
    if rc == 0:
        import mmdsynth
        model = mmdsynth.load(model_dir)
        x, y = model.sample(6000, seed=0)
        np.savez_compressed(out / "ntk_samples.npz", x=to_uint8(x), y=y)
        row.update(settings=model.settings_.to_dict(),
                   final_loss=model.losses_[-1])
    log_row(out, row)


def phase_mepf_worker(out: Path, work: Path, encoder: str, epsilon: float, deadline: float, seed: int,
                      calibrate: int = 1_000, every: int = PAPER["select_every"]) -> None:
    """One DP-MEPF run at the paper's schedule, capped by ``deadline`` (a time.time()): the step time is measured
    over the second half of the first ``calibrate`` iterations (the first half warms up). ``calibrate`` and
    ``every`` are the paper's run's 1,000 and 5,000; smaller values only smoke-test the script on a CPU."""
    from mmdsynth import DPMEPF
    from mmdsynth.data import load_dataset

    data = load_dataset("mnist")
    folder = work / mepf_name(epsilon)
    model = DPMEPF(epsilon=epsilon, n_classes=10, encoder=encoder, seed=seed, checkpoint_every=every,
                   **{**PAPER, "iterations": calibrate, "select_every": every})
    t = time.perf_counter()
    model.fit(data.x_train, data.y_train, dataset="mnist", out=folder, train=False)
    release_s = time.perf_counter() - t
    model.iterations = calibrate // 2
    model.fit(None, out=folder, resume=True)                     # warm-up (kernel choice, caches)
    model.iterations = calibrate
    t = time.perf_counter()
    model.fit(None, out=folder, resume=True)                     # the step time (fit ends by copying the generator
                                                                  # to the CPU: the GPU's queue is drained)
    step_s = (time.perf_counter() - t) / (calibrate - calibrate // 2)
    sample_s = 30.0                                               # sampling and saving, with room to spare
    left = deadline - time.time() - sample_s
    reach = min(PAPER["iterations"], int(max(0.0, left) / step_s) // every * every)
    if reach > calibrate:
        model.iterations = reach
        t = time.perf_counter()
        model.fit(None, out=folder, resume=True)
        train_s = time.perf_counter() - t + step_s * calibrate
    else:
        reach, train_s = calibrate, step_s * calibrate
    x, y = model.sample(6000, seed=seed)
    xf, yf = model.sample(6000, seed=seed, checkpoint="final")
    np.savez_compressed(out / f"{mepf_name(epsilon)}.npz", x=to_uint8(x), y=y, xf=to_uint8(xf), yf=yf)
    log_row(out, {"phase": "mepf", "epsilon": epsilon, "seed": seed, **PAPER, "select_every": every,
                  "iterations_reached": reach,
                  "paper_fraction": reach / PAPER["iterations"], "release_s": round(release_s, 1),
                  "step_ms": round(step_s * 1e3, 2), "train_s": round(train_s, 1), "selection": model.selection_,
                  "final_loss": model.losses_[-1]})


#: issue 49's levers (MNIST, eps 1, seed 0): name -> image_utility.py options. ``ntk`` is the default recipe
#: (``fit --method dp-ntk``'s image settings), the baseline in the same run; ``ntk_long`` trains the same recipe 3x
#: as long (the lr decay stretched with it); ``rc`` is a generator on the dp-randconv release at its defaults (2 of
#: the 32 networks a step, 1,500 x 250); ``rc_all`` matches all 32 networks every step at batch 500 for 3,000 steps.
LEVERS = {
    "ntk": ["--method", "dp-ntk", "--iterations", "2000", "--batch-size", "5000", "--lr-step", "1500"],
    "ntk_long": ["--method", "dp-ntk", "--iterations", "6000", "--batch-size", "5000", "--lr-step", "4500"],
    "rc": ["--method", "dp-randconv", "--iterations", "1500", "--batch-size", "250", "--lr-step", "500"],
    "rc_all": ["--method", "dp-randconv", "--iterations", "3000", "--batch-size", "500", "--lr-step", "1000",
               "--set", "blocks_per_step=null"],
}
#: a CPU smoke test of the levers phase: every variant shrunk to seconds (later options on the line win)
SMOKE = ["--iterations", "3", "--batch-size", "40", "--lr-step", "2", "--cnn-samples", "300", "--cnn-width", "8",
         "--cnn-epochs", "1"]
SMOKE_SET = {"dp-ntk": "ntk_width=20", "dp-randconv": "n_networks=2"}


def lever_command(name: str, out: Path, cnn_seeds: list[int], smoke: bool) -> list[str]:
    """The ``image_utility.py`` command of lever ``name``: MNIST, eps 1, seed 0, scored with ``--cnn``."""
    opts, sets = list(LEVERS[name]), []
    if "--set" in opts:                        # --set takes one list, last on the line
        opts, sets = opts[:opts.index("--set")], opts[opts.index("--set") + 1:]
    if smoke:
        opts, sets = opts + SMOKE, sets + [SMOKE_SET[LEVERS[name][1]]]
    opts += ["--set", *sets] if sets else []
    return [sys.executable, str(Path(__file__).with_name("image_utility.py")), "--dataset", "mnist", "--epsilon",
            "1", "--seeds", "0", *opts, "--cnn", "--cnn-seeds", *map(str, cnn_seeds), "--progress", "--out",
            str(out / "levers.jsonl"), "--grids", str(out / f"grid_{name}")]


def phase_levers(out: Path, deadline: float, names: list[str], cnn_seeds: list[int], smoke: bool) -> None:
    """Every lever in parallel on the one device (threads split between them), each killed at the deadline; with
    ``--progress`` a killed lever's log still says how far its training got."""
    threads = str(max(1, (os.cpu_count() or 2) // len(names)))
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "PYTHONUNBUFFERED": "1"}
    procs = {}
    for name in names:
        log = open(out / f"lever_{name}.log", "w")
        procs[name] = (subprocess.Popen(lever_command(name, out, cnn_seeds, smoke), stdout=log,
                                        stderr=subprocess.STDOUT, env=env), time.time())
    running = dict(procs)
    while running:                                    # each lever's own wall time, in whatever order they end
        for name, (p, t0) in list(running.items()):
            rc = p.poll()
            if rc is None and time.time() < deadline:
                continue
            if rc is None:
                p.kill()
                rc = "killed at the deadline"
            del running[name]
            log_row(out, {"phase": "lever", "name": name, "rc": rc, "wall_s": round(time.time() - t0, 1),
                          "command": " ".join(p.args[1:])})
        time.sleep(1.0)
    with open(out / "levers.log", "w") as fh:         # one file back instead of one per lever (8 files at most)
        for name in names:
            fh.write(f"===== {name}\n" + (out / f"lever_{name}.log").read_text()[-20_000:])
            (out / f"lever_{name}.log").unlink()


def run(args) -> None:
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    start = time.time()
    deadline = start + args.deadline
    if "mepf" in args.phases and not args.encoder:
        raise SystemExit("the mepf phase needs --encoder (a PUBLIC encoder: mmdsynth pretrain-encoder)")
    log_row(out, env_row())
    if "ntk" in args.phases:
        phase_ntk(out, work, min(args.ntk_cap, deadline - time.time() - 120), args.ntk_epsilon, args.ntk_args.split())
    if "mepf" in args.phases:
        procs = []
        for eps in args.mepf_epsilon:
            cmd = [sys.executable, __file__, "mepf-worker", "--out", str(out), "--work", str(work), "--encoder",
                   args.encoder, "--epsilon", str(eps), "--until", str(deadline), "--seed", str(args.seed),
                   "--calibrate", str(args.calibrate), "--every", str(args.every)]
            procs.append(subprocess.Popen(cmd, stdout=open(out / f"{mepf_name(eps)}.log", "w"),
                                          stderr=subprocess.STDOUT))
        for p in procs:
            try:
                p.wait(timeout=max(1.0, deadline + 60 - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                log_row(out, {"phase": "mepf", "error": "worker passed the deadline", "args": p.args[-7:]})
    if "levers" in args.phases:
        phase_levers(out, deadline, args.levers, args.lever_cnn_seeds, args.smoke)
    log_row(out, {"phase": "done", "wall_s": round(time.time() - start, 1)})


def score(args) -> None:
    from mmdsynth.data import load_dataset
    from mmdsynth.evaluation import image_classifier_scores

    folder = Path(args.folder)
    test = load_dataset("mnist")
    rows = [json.loads(line) for line in open(folder / "results.jsonl")]
    env = next((r for r in rows if r["phase"] == "env"), {})
    for row in rows:
        if row["phase"] == "ntk" and row.get("rc") == 0:
            z = np.load(folder / "ntk_samples.npz")
            row.update(image_classifier_scores(z["x"] / 255.0, z["y"], test.x_test, test.y_test, seed=0))
        elif row["phase"] == "mepf" and "epsilon" in row:
            z = np.load(folder / f"{mepf_name(row['epsilon'])}.npz")
            row.update(image_classifier_scores(z["x"] / 255.0, z["y"], test.x_test, test.y_test, seed=row["seed"]))
            row.update({f"final_{k}": v for k, v in image_classifier_scores(
                z["xf"] / 255.0, z["yf"], test.x_test, test.y_test, seed=row["seed"]).items()})
        else:
            continue
        emit({"device": env.get("device"), "torch": env.get("torch"), "date": time.strftime("%Y-%m-%d"),
              **row}, args.out)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="on the GPU machine")
    r.add_argument("--out", required=True)
    r.add_argument("--work", default="/tmp/device_images")
    r.add_argument("--encoder", default=None, help="PUBLIC encoder (mmdsynth pretrain-encoder): the mepf phase")
    r.add_argument("--deadline", type=float, default=420, help="seconds for everything")
    r.add_argument("--phases", nargs="+", default=["ntk", "mepf"], choices=["ntk", "mepf", "levers"])
    r.add_argument("--levers", nargs="+", default=list(LEVERS), choices=list(LEVERS))
    r.add_argument("--lever-cnn-seeds", nargs="+", type=int, default=[0], help="ConvNet training seeds per lever")
    r.add_argument("--smoke", action="store_true", help="levers shrunk to seconds: a CPU test of the script")
    r.add_argument("--ntk-epsilon", type=float, default=1.0)
    r.add_argument("--ntk-cap", type=float, default=150, help="seconds at most for the DP-NTK fit")
    r.add_argument("--mepf-epsilon", nargs="+", type=float, default=[10.0, 1.0])
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--ntk-args", default="", help=argparse.SUPPRESS)
    r.add_argument("--calibrate", type=int, default=1_000, help=argparse.SUPPRESS)
    r.add_argument("--every", type=int, default=PAPER["select_every"], help=argparse.SUPPRESS)
    w = sub.add_parser("mepf-worker")
    w.add_argument("--out", required=True)
    w.add_argument("--work", required=True)
    w.add_argument("--encoder", required=True)
    w.add_argument("--epsilon", type=float, required=True)
    w.add_argument("--until", type=float, required=True)
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--calibrate", type=int, default=1_000)
    w.add_argument("--every", type=int, default=PAPER["select_every"])
    s = sub.add_parser("score", help="on the CPU, the folder that came back")
    s.add_argument("folder")
    s.add_argument("--out", default="benchmarks/out/device_images.jsonl")
    args = p.parse_args()
    if args.cmd == "run":
        run(args)
    elif args.cmd == "mepf-worker":
        phase_mepf_worker(Path(args.out), Path(args.work), args.encoder, args.epsilon, args.until, args.seed,
                          args.calibrate, args.every)
    else:
        score(args)


if __name__ == "__main__":
    main()
