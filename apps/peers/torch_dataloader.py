"""PyTorch's DataLoader over an ImageFolder-like Dataset, as most users write it.

    python3 torch_dataloader.py --list train.txt --workers 2 --batch 64 --epochs 3

pin_memory is off (no GPU here); shuffle on; the consumer does nothing but take
the batch, so the figure is the loader's own throughput.
"""
import torch
from torch.utils.data import DataLoader, Dataset

from common import arguments, load_rgb, read_list, time_epochs, train_transform


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
    a = ap.parse_args()
    torch.set_num_threads(1)
    ds = ListDataset(read_list(a.list), train_transform())
    loader = DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers, pin_memory=a.pin_memory,
                        persistent_workers=a.workers > 0)
    time_epochs(loader, a.epochs)


if __name__ == "__main__":
    main()
