"""The Python two-queue threaded pipeline: decode threads -> Queue(12) ->
transfer thread -> Queue(1) -> consumer, with PIL and torchvision transforms.

    python3 two_queue.py --list train.txt --workers 2 --batch 64 --epochs 3

Each decode thread builds whole batches (its share of the epoch's shuffled
order) and puts them on the first queue; the transfer thread would move each
batch to the GPU (here, with no GPU, it makes the batch contiguous, as
.pin_memory() or .to(device) would copy it) and puts it on the second queue.
"""
import queue
import random
import threading
import time

import torch

from common import arguments, load_rgb, read_list, report, train_transform

STOP = object()


def main():
    a = arguments(__doc__).parse_args()
    torch.set_num_threads(1)
    samples = read_list(a.list)
    transform = train_transform(recipe=a.recipe)
    for e in range(a.epochs):
        order = list(range(len(samples)))
        random.Random(e).shuffle(order)
        batches = [order[i:i + a.batch] for i in range(0, len(order), a.batch)]
        decoded, ready = queue.Queue(12), queue.Queue(1)

        def decode(share):
            for b in share:
                imgs = [transform(load_rgb(samples[i][0])) for i in b]
                decoded.put((torch.stack(imgs), torch.tensor([samples[i][1] for i in b])))
            decoded.put(STOP)

        def transfer():
            stopped = 0
            while stopped < a.workers:
                item = decoded.get()
                if item is STOP:
                    stopped += 1
                    continue
                images, labels = item
                ready.put((images.contiguous(), labels))  # .cuda(non_blocking=True) with a GPU
            ready.put(STOP)

        t0, n = time.perf_counter(), 0
        threads = [threading.Thread(target=decode, args=(batches[w::a.workers],)) for w in range(a.workers)]
        threads.append(threading.Thread(target=transfer))
        for t in threads:
            t.start()
        while (item := ready.get()) is not STOP:
            n += item[0].shape[0]
        for t in threads:
            t.join()
        report(e, n, time.perf_counter() - t0)


if __name__ == "__main__":
    main()
