#!/usr/bin/env python3
"""The GPU-decode loop a careful PyTorch user writes, as Conveyor's hybrid decode's peer:
torchvision's nvJPEG (`decode_jpeg(list, device='cuda')`, one batched call per batch), then
RandomResizedCrop 224 + flip + normalize to float16 on the GPU, batch 64. Needs a CUDA PyTorch
and torchvision >= 0.19 (batched GPU decode); prints one line of images/s per epoch and the
median of each variant, then the fastest.

    python3 apps/peers/nvjpeg_loop.py --list photos.txt --epochs 3 [--variant all]

The list is `path label` per line, as `conveyor bench --list` reads it. Every variant reads each
file's bytes once, before the first epoch (a list repeated 10 times shares them), as a careful
user who knows the data fits in memory would. The variants, all with the same crops, flips and normalize:
  resized_crop  torchvision's resized_crop on each decoded uint8 image (antialias=True)
  interpolate   the crop as a view, interpolate(float, bilinear, antialias=True) per image,
                flip and normalize once on the whole batch
  prefetch      interpolate, with the next batch's decode on a second CUDA stream in a thread,
                so nvJPEG's host-side work overlaps the current batch's kernels
`--variant all` (the default) runs each for --epochs and reports the fastest: the peer's figure.
`--device cpu` runs the same code on the CPU (one image at a time where torchvision's decode
takes no list): for checking the script where no GPU is, not for figures.
"""
import argparse
import math
import queue
import random
import statistics
import sys
import threading
import time

VARIANTS = ("resized_crop", "interpolate", "prefetch")


def rrc_params(h, w, rng, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision's RandomResizedCrop.get_params, drawn from a Python Random (no tensor per draw)."""
    area = h * w
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(*log_ratio))
        cw = int(round(math.sqrt(target * aspect)))
        ch = int(round(math.sqrt(target / aspect)))
        if 0 < cw <= w and 0 < ch <= h:
            return rng.randint(0, h - ch), rng.randint(0, w - cw), ch, cw
    in_ratio = w / h
    if in_ratio < ratio[0]:
        cw, ch = w, int(round(w / ratio[0]))
    elif in_ratio > ratio[1]:
        ch, cw = h, int(round(h * ratio[1]))
    else:
        cw, ch = w, h
    return (h - ch) // 2, (w - cw) // 2, ch, cw


class Loop:
    def __init__(self, torch, files, crop, batch, dev):
        import torch.nn.functional as nnf
        try:
            import torchvision.transforms.v2.functional as F
        except ImportError:  # torchvision < 0.15 (Debian 12's), for --device cpu
            import torchvision.transforms.functional as F
        from torchvision.io import ImageReadMode, decode_jpeg
        self.torch, self.nnf, self.F = torch, nnf, F
        self.decode_jpeg, self.rgb = decode_jpeg, ImageReadMode.RGB
        self.files, self.crop, self.batch, self.dev = files, crop, batch, dev
        self.mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1)
        self.std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1)

    def decode(self, idx):
        data = [self.files[i] for i in idx]
        if self.dev.type == "cuda":
            return self.decode_jpeg(data, mode=self.rgb, device=self.dev)
        return [self.decode_jpeg(d, mode=self.rgb) for d in data]  # CPU: torchvision decodes one at a time

    def render(self, images, rng, variant):
        torch, c = self.torch, self.crop
        if variant == "resized_crop":
            out = torch.empty(len(images), 3, c, c, dtype=torch.uint8, device=self.dev)
            for k, img in enumerate(images):
                top, left, h, w = rrc_params(img.shape[-2], img.shape[-1], rng)
                crop = self.F.resized_crop(img, top, left, h, w, [c, c], antialias=True)
                out[k] = crop.flip(-1) if rng.random() < 0.5 else crop
            return ((out.float() / 255 - self.mean) / self.std).half()
        out = torch.empty(len(images), 3, c, c, dtype=torch.float32, device=self.dev)
        flips = []
        for k, img in enumerate(images):
            top, left, h, w = rrc_params(img.shape[-2], img.shape[-1], rng)
            box = img[None, :, top:top + h, left:left + w].float()
            out[k] = self.nnf.interpolate(box, size=(c, c), mode="bilinear", align_corners=False, antialias=True)[0]
            if rng.random() < 0.5:
                flips.append(k)
        if flips:
            sel = torch.tensor(flips, device=self.dev)
            out[sel] = out[sel].flip(-1)
        return ((out / 255 - self.mean) / self.std).half()

    def epoch(self, order, rng, variant):
        batches = [order[b:b + self.batch] for b in range(0, len(order), self.batch)]
        last = None
        if variant != "prefetch":
            for idx in batches:
                last = self.render(self.decode(idx), rng, variant)
            return last
        # The next batch's decode on a side stream, in a thread; the main stream waits on its event.
        torch = self.torch
        side = torch.cuda.Stream(device=self.dev) if self.dev.type == "cuda" else None
        ready = queue.Queue(maxsize=2)

        def produce():
            try:
                for idx in batches:
                    if side is None:
                        ready.put((self.decode(idx), None))
                        continue
                    with torch.cuda.stream(side):
                        images = self.decode(idx)
                        done = torch.cuda.Event()
                        done.record(side)
                    ready.put((images, done))
            except BaseException as e:  # surfaces in the consumer, which would otherwise wait forever
                ready.put((e, None))
            ready.put(None)

        t = threading.Thread(target=produce, daemon=True)
        t.start()
        while (item := ready.get()) is not None:
            images, done = item
            if isinstance(images, BaseException):
                raise images
            if done is not None:
                torch.cuda.current_stream().wait_event(done)
                for img in images:
                    img.record_stream(torch.cuda.current_stream())
            last = self.render(images, rng, "interpolate")
        t.join()
        return last


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--list", required=True)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--crop", type=int, default=224)
    ap.add_argument("--epochs", type=int, default=3, help="per variant; the first is a warm-up, not counted")
    ap.add_argument("--variant", default="all", choices=VARIANTS + ("all",))
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    a = ap.parse_args()
    if a.epochs < 2:
        ap.error("--epochs must be at least 2 (the first is a warm-up)")
    import torch
    import torchvision
    from torchvision.io import read_file

    if a.device == "cuda" and not torch.cuda.is_available():
        print("nvjpeg_loop: no CUDA device for PyTorch", file=sys.stderr)
        return 1
    dev = torch.device(a.device)
    paths = []
    with open(a.list) as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if line:
                if " " not in line:
                    print(f"nvjpeg_loop: {a.list}:{n}: expected 'path label'", file=sys.stderr)
                    return 1
                paths.append(line.rsplit(" ", 1)[0])
    cache = {}
    for p in paths:
        if p not in cache:
            cache[p] = read_file(p)
    files = [cache[p] for p in paths]
    loop = Loop(torch, files, a.crop, a.batch, dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    medians = {}
    for variant in (VARIANTS if a.variant == "all" else (a.variant,)):
        rng = random.Random(0)
        rates = []
        for epoch in range(a.epochs):
            order = list(range(len(files)))
            rng.shuffle(order)
            sync()
            t0 = time.perf_counter()
            loop.epoch(order, rng, variant)
            sync()
            rate = len(order) / (time.perf_counter() - t0)
            print(f"{variant} epoch {epoch}: {rate:.0f} images/s" + (" (warm-up)" if epoch == 0 else ""), flush=True)
            if epoch > 0:
                rates.append(rate)
        medians[variant] = statistics.median(rates)
        print(f"{variant}: {medians[variant]:.0f} images/s median over {len(rates)} epochs", flush=True)
    best = max(medians, key=medians.get)
    name = torch.cuda.get_device_name() if dev.type == "cuda" else "cpu"
    print(f"nvjpeg_loop: {medians[best]:.0f} images/s median over {a.epochs - 1} epochs, variant {best} (the fastest of "
          f"{', '.join(f'{v} {r:.0f}' for v, r in medians.items())}; torch {torch.__version__}, torchvision "
          f"{torchvision.__version__}, {name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
