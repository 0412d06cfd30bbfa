"""What the peer benchmarks share: the list file, the transforms and the report line.

The list file is Conveyor's format: one sample a line, the path then the label,
the label being the last whitespace-separated field (paths may hold spaces and
apostrophes), relative paths against the list's folder, '#' comments.
Each benchmark prints one line per epoch, which compare.py reads:
    epoch E: N images in S s
"""
import argparse
import os
import time


def arguments(description):
    """The flags every peer benchmark takes: --list, --workers, --batch, --epochs."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--list", required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--recipe", choices=sorted(RECIPES), default="rrc", help="the transforms (RECIPES)")
    return ap


def photo_bench_arguments(description, rounds):
    """The flags of the benchmarks over copied photos (shards_bench, pack_formats, remote_bench): --folder,
    --repeat, --rounds, --workers, --build (the build folder whose apps/conveyor runs)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--folder", required=True)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--build", default=os.path.join(root, "build", "release"))
    return ap


def conveyor_binary(args):
    """The conveyor command of --build."""
    return os.path.join(os.path.abspath(args.build), "apps", "conveyor")


def copy_photos(folder, repeat, work):
    """The photos of `folder` copied `repeat` times into work/files (distinct files, as a real dataset has),
    and a list file over them, labels 0-99: (list path, the copies)."""
    import shutil
    photos = sorted(os.path.join(folder, f) for f in os.listdir(folder))
    os.makedirs(os.path.join(work, "files"), exist_ok=True)
    files, lines = [], []
    for r in range(repeat):
        for i, p in enumerate(photos):
            dst = os.path.join(work, "files", f"{r}-{i}{os.path.splitext(p)[1].lower()}")
            shutil.copyfile(p, dst)
            files.append(dst)
            lines.append(f"{dst} {i % 100}")
    listfile = os.path.join(work, "list.txt")
    with open(listfile, "w") as f:
        f.write("\n".join(lines) + "\n")
    return listfile, files


def read_list(path):
    base = os.path.dirname(os.path.abspath(path))
    samples = []
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.rsplit(None, 1)
            if len(parts) != 2 or not parts[1].isdigit():
                raise SystemExit(f"{path}:{n}: expected 'path label'")
            p = parts[0]
            samples.append((p if os.path.isabs(p) else os.path.join(base, p), int(parts[1])))
    return samples


MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]

# The recipes every system runs, as Conveyor's transform list (then normalize to
# float32); train_transform() builds the same with torchvision.
#   rrc             the 2015 ImageNet recipe
#   trivialaugment  torchvision's current ResNet-50 recipe at 224, before MixUp/CutMix
RECIPES = {
    "rrc": "RandomResizedCrop(224), RandomHorizontalFlip()",
    "trivialaugment": "RandomResizedCrop(224), RandomHorizontalFlip(), TrivialAugmentWide(), RandomErasing(0.1)",
}


def train_transform(size=224, normalize=True, recipe="rrc"):
    """RECIPES[recipe] with torchvision, then float normalize (RandomErasing after it, as torchvision's reference
    puts it). normalize=False stops at uint8 CHW tensors, for a normalize on the GPU (apex's prefetcher): rrc only."""
    from torchvision import transforms as T
    if not normalize:
        if recipe != "rrc":
            raise SystemExit(f"--recipe {recipe}: RandomErasing follows a normalize on the CPU here; use --device cpu")
        return T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.PILToTensor()])
    ops = [T.RandomResizedCrop(size), T.RandomHorizontalFlip()]
    if recipe == "trivialaugment":
        ops.append(T.TrivialAugmentWide())
    ops += [T.ToTensor(), T.Normalize(mean=MEAN, std=STD)]
    if recipe == "trivialaugment":
        ops.append(T.RandomErasing(p=0.1))
    return T.Compose(ops)


def load_rgb(path):
    from PIL import Image
    with open(path, "rb") as f:
        return Image.open(f).convert("RGB")


def report(epoch, images, seconds):
    print(f"epoch {epoch}: {images} images in {seconds:.4f} s", flush=True)


def time_epochs(loader, epochs, step=None, sync=None):
    """Takes every batch of `epochs` epochs of an iterable of (images, labels), reporting each epoch.

    step(images, labels), when given, runs on each batch (e.g. the copy to the GPU and its
    normalize); sync(), when given, runs before each epoch's clock stops (e.g. the GPU's queue)."""
    for e in range(epochs):
        t0, n = time.perf_counter(), 0
        for images, labels in loader:
            if step:
                step(images, labels)
            n += images.shape[0]
        if sync:
            sync()
        report(e, n, time.perf_counter() - t0)
