"""`mmdsynth pretrain-encoder`: a public encoder for DP-MEPF (trained on public data, or a seeded random one)."""
from __future__ import annotations

import argparse
import json

from ..errors import InvalidParameterError


def cmd_pretrain_encoder(args) -> int:
    from ..encoders.pretrain import pretrain_encoder
    from ..runtime import default_device

    if args.random == (args.dataset is not None):
        raise InvalidParameterError("pretrain-encoder takes exactly one of --dataset PUBLIC (train on it) and "
                                    "--random (save the seeded initialisation, trained on nothing).")
    # options of the other mode are refused, not silently ignored
    other = (("--epochs", args.epochs), ("--batch-size", args.batch_size), ("--lr", args.lr),
             ("--resume", args.resume or None), ("--data-dir", args.data_dir)) if args.random else \
        (("--channels", args.channels), ("--image-size", args.image_size))
    given = [flag for flag, value in other if value is not None]
    if given:
        mode, what = (("--random", "nothing is trained") if args.random else
                      ("--dataset", "the dataset sets the input channels and size"))
        raise InvalidParameterError(f"pretrain-encoder {mode} does not take {', '.join(given)} ({what}); "
                                    "drop them.")
    if args.random:
        args.channels = 3 if args.channels is None else args.channels
        args.image_size = 32 if args.image_size is None else args.image_size
    if args.out is None:
        from ..features.encoders import encoder_dir

        name = f"random-{args.arch}-{args.channels}x{args.image_size}" if args.random else f"{args.dataset}-{args.arch}"
        args.out = str(encoder_dir() / f"{name}.safetensors")
    if args.random:
        from ..encoders.pretrain import random_encoder

        spec = random_encoder(args.arch, args.out, in_channels=args.channels, image_size=args.image_size,
                              seed=args.seed)
    else:
        given = {k: v for k, v in (("epochs", args.epochs), ("batch_size", args.batch_size), ("lr", args.lr))
                 if v is not None}                                  # the rest: pretrain_encoder's defaults
        spec = pretrain_encoder(args.dataset, args.arch, args.out, seed=args.seed, resume=args.resume,
                                device=default_device(args.device), progress=not args.quiet, data_dir=args.data_dir,
                                **given)
    print(json.dumps({"out": str(args.out), **spec}))
    return 0


def add_parser(sub) -> argparse.ArgumentParser:
    s = sub.add_parser("pretrain-encoder", help="train an encoder on a PUBLIC image dataset (for DP-MEPF's "
                       "perceptual features); saves FILE.safetensors + FILE.json with its test accuracy")
    s.add_argument("--dataset", default=None, help="a PUBLIC image dataset (mnist, fashion-mnist, cifar10, digits)")
    s.add_argument("--random", action="store_true", help="no training: save the architecture at its seeded random "
                   "initialisation (public by construction; for private data with no public dataset at hand, "
                   "e.g. CIFAR-10 without ImageNet); give --channels and --image-size")
    s.add_argument("--channels", type=int, default=None, help="with --random: input channels (default 3)")
    s.add_argument("--image-size", type=int, default=None, help="with --random: input size (default 32)")
    s.add_argument("--arch", required=True, help="vgg_small, resnet_small, vgg19 or resnet18")
    s.add_argument("--out", default=None, help="weights file, ending in .safetensors (default: the encoder "
                   "folder, ~/.cache/mmdsynth/encoders/DATASET-ARCH.safetensors, so --encoder DATASET-ARCH finds it)")
    s.add_argument("--epochs", type=int, default=None, help="with --dataset (default 5)")
    s.add_argument("--batch-size", type=int, default=None, help="with --dataset (default 128)")
    s.add_argument("--lr", type=float, default=None, help="with --dataset (default 1e-3)")
    s.add_argument("--seed", type=int, default=0, help="initialisation and batch order (public: the data are public)")
    s.add_argument("--resume", action="store_true", help="continue an interrupted run (checkpoint beside --out)")
    s.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    s.add_argument("--data-dir", default=None, help="extra folder holding the dataset's files (besides "
                   "MMDSYNTH_DATA_DIR)")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_pretrain_encoder)
    return s
