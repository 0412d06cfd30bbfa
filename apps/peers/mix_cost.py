"""What MixUp and CutMix on the device cost a training step, on a GPU.

    python3 mix_cost.py --module BUILD/python --list photos-x10.txt [--workers 16] [--rounds 2]

The consumer is a real one: torchvision's ResNet-50 at batch 256, bfloat16
autocast, channels_last, SGD, cross-entropy. The same loader
(RandomResizedCrop 224 + flip, normalize to bfloat16 on the device) runs
without a batch op, with MixUp(0.2), with CutMix(1.0) and with both (each batch
takes one), in rotated order, `--rounds` times; each run times `--steps`
training steps after `--warmup` steps and synchronizes the GPU before its
clock stops. With a batch op the loss is cross-entropy against the soft
labels, as a recipe with MixUp computes it; without, against the integer
labels. Prints images/s per run and, per mode, the median and its cost
against no batch op, side by side (the consumer, not the loader, is the bound:
the pipeline's stats line says so).
"""
import argparse
import statistics
import sys
import time

MODES = ("none", "mixup", "cutmix", "both")


def run(conveyor_torch, T, torch, model, opt, args, mode):
    k = args.classes
    mix = {"none": [], "mixup": [T.MixUp(alpha=0.2, num_classes=k)], "cutmix": [T.CutMix(alpha=1.0, num_classes=k)],
           "both": [T.MixUp(alpha=0.2, num_classes=k), T.CutMix(alpha=1.0, num_classes=k)]}[mode]
    loader = conveyor_torch.Loader(list=args.list, batch_size=args.batch, workers=args.workers, device=args.device,
                                   normalize="bfloat16", gpu_decode="off", epochs=0,
                                   transforms=[T.RandomResizedCrop(224), T.RandomHorizontalFlip()] + mix)
    F = torch.nn.functional
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)

    def batches():
        while True:
            yield from loader

    it = batches()
    t0 = None
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            sync()
            t0 = time.perf_counter()
        images, targets = next(it)
        images = images.contiguous(memory_format=torch.channels_last)
        with torch.autocast(args.device, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(images), targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    sync()
    rate = args.steps * args.batch / (time.perf_counter() - t0)
    summary = loader.stats().get("bottleneck", "")
    del loader
    return rate, summary


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--module", required=True, help="folder holding the conveyor package (BUILD/python)")
    ap.add_argument("--list", required=True)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--classes", type=int, default=1000, help="the list's labels are below it")
    ap.add_argument("--model", default="resnet50", help="a torchvision model (resnet18 for a quick check)")
    ap.add_argument("--device", default="cuda", help="cpu: a quick check of the script without a GPU")
    args = ap.parse_args()
    sys.path.insert(0, args.module)
    import torch
    import torchvision
    import conveyor.torch as conveyor_torch
    from conveyor import transforms as T

    torch.backends.cudnn.benchmark = True
    model = getattr(torchvision.models, args.model)(num_classes=args.classes).to(args.device).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    rates = {m: [] for m in MODES}
    for r in range(args.rounds):
        order = MODES[r % len(MODES):] + MODES[:r % len(MODES)]
        for mode in order:
            rate, summary = run(conveyor_torch, T, torch, model, opt, args, mode)
            rates[mode].append(rate)
            print(f"round {r + 1} {mode}: {rate:.0f} images/s; {summary}", flush=True)
    base = statistics.median(rates["none"])
    for mode in MODES:
        m = statistics.median(rates[mode])
        print(f"mix_cost: {mode}: median {m:.0f} images/s over {args.rounds} rounds, "
              f"cost {100 * (1 - m / base):+.1f}% against none", flush=True)


if __name__ == "__main__":
    main()
