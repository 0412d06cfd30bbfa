"""PyTorch's DataLoader over an ImageFolder-like Dataset, as most users write it.

    python3 torch_dataloader.py --list train.txt --workers 2 --batch 64 --epochs 3

pin_memory is off (no GPU here); shuffle on; the consumer does nothing but take
the batch, so the figure is the loader's own throughput. With --device cuda, as a
GPU user writes it: pin_memory=True, uint8 batches copied with non_blocking=True
and normalized to float32 on the GPU (apex's data_prefetcher recipe).
"""
import torch
from torch.utils.data import DataLoader, Dataset

from common import MEAN, STD, arguments, load_rgb, read_list, time_epochs, train_transform


class ListDataset(Dataset):
    def __init__(self, samples, transform):
        self.samples, self.transform = samples, transform

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        path, label = self.samples[i]
        return self.transform(load_rgb(path)), label


def main():
    ap = arguments(__doc__)
    ap.add_argument("--pin-memory", action="store_true")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    a = ap.parse_args()
    torch.set_num_threads(1)
    cuda = a.device == "cuda"
    ds = ListDataset(read_list(a.list), train_transform(normalize=not cuda, recipe=a.recipe))
    loader = DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers, pin_memory=a.pin_memory or cuda,
                        persistent_workers=a.workers > 0)
    if not cuda:
        time_epochs(loader, a.epochs)
        return
    mean = torch.tensor(MEAN, device="cuda").view(1, 3, 1, 1) * 255
    std = torch.tensor(STD, device="cuda").view(1, 3, 1, 1) * 255

    def step(images, labels):
        x = images.cuda(non_blocking=True).float().sub_(mean).div_(std)
        labels.cuda(non_blocking=True)
        return x

    time_epochs(loader, a.epochs, step, torch.cuda.synchronize)


if __name__ == "__main__":
    main()
