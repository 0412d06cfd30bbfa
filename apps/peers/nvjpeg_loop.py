#!/usr/bin/env python3
"""The simplest GPU-decode loader (issue 22's third row): read each batch's files, decode them
with torchvision's nvJPEG (`decode_jpeg(..., device='cuda')`), then RandomResizedCrop 224 +
flip + normalize to float16 on the GPU, batch 64. Needs a CUDA PyTorch and torchvision >= 0.19
(batched GPU decode); prints one line of images/s per epoch and the median.

    python3 apps/peers/nvjpeg_loop.py --list photos.txt --epochs 3

The list is `path label` per line, as `conveyor bench --list` reads it.
"""
import argparse
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--list", required=True)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--crop", type=int, default=224)
    ap.add_argument("--epochs", type=int, default=3, help="the first is a warm-up, not counted")
    a = ap.parse_args()
    import torch
    import torchvision
    from torchvision.io import ImageReadMode, decode_jpeg, read_file
    from torchvision.transforms import RandomResizedCrop
    import torchvision.transforms.v2.functional as F

    if not torch.cuda.is_available():
        print("nvjpeg_loop: no CUDA device for PyTorch", file=sys.stderr)
        return 1
    paths = []
    with open(a.list) as f:
        for line in f:
            line = line.rstrip("\n")
            if line:
                paths.append(line.rsplit(" ", 1)[0])
    dev = torch.device("cuda")
    mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1)
    g = torch.Generator().manual_seed(0)
    rates = []
    batch = None
    for epoch in range(a.epochs):
        order = torch.randperm(len(paths), generator=g).tolist()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for b in range(0, len(order), a.batch):
            idx = order[b:b + a.batch]
            data = [read_file(paths[i]) for i in idx]
            images = decode_jpeg(data, mode=ImageReadMode.RGB, device=dev)
            out = torch.empty(len(idx), 3, a.crop, a.crop, dtype=torch.uint8, device=dev)
            for k, img in enumerate(images):
                top, left, h, w = RandomResizedCrop.get_params(img, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3))
                crop = F.resized_crop(img, top, left, h, w, [a.crop, a.crop], antialias=True)
                if torch.rand(1, generator=g).item() < 0.5:
                    crop = crop.flip(-1)
                out[k] = crop
            batch = ((out.float() / 255 - mean) / std).half()
        torch.cuda.synchronize()
        rate = len(order) / (time.perf_counter() - t0)
        print(f"epoch {epoch}: {rate:.0f} images/s" + (" (warm-up)" if epoch == 0 else ""), flush=True)
        if epoch > 0:
            rates.append(rate)
    del batch
    print(f"nvjpeg_loop: {statistics.median(rates):.0f} images/s median over {len(rates)} epochs "
          f"(torch {torch.__version__}, torchvision {torchvision.__version__}, {torch.cuda.get_device_name()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
