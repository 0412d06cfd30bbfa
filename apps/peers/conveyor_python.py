"""Conveyor from Python (conveyor.torch.Loader), as a PyTorch user writes it.

    python3 conveyor_python.py --list train.txt --workers 2 --batch 64 --epochs 3 --module build/release/python

The same list, transforms and batch as the other peers (common.RECIPES, then
normalize to float32); the host backend hands the workers' buffers over
and the tensors are zero-copy views (torch.from_dlpack). The consumer only takes
each batch, so the figure is the loader's throughput as Python sees it.
"""
import sys

from common import RECIPES, arguments, time_epochs


def main():
    ap = arguments(__doc__)
    ap.add_argument("--module", required=True, help="folder holding the conveyor package (BUILD/python)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cuda: device tensors, normalized on the GPU")
    a = ap.parse_args()
    sys.path.insert(0, a.module)
    import torch
    from conveyor.torch import Loader

    torch.set_num_threads(1)
    loader = Loader(list=a.list, batch_size=a.batch, workers=a.workers, transforms=RECIPES[a.recipe],
                    normalize="float32", device=a.device, epochs=a.epochs)
    time_epochs(loader, a.epochs, sync=torch.cuda.synchronize if a.device == "cuda" else None)


if __name__ == "__main__":
    main()
