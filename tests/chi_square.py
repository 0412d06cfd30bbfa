"""The two-sample chi-square test the torchvision comparisons share (auto_augment_test.py, erasing_test.py)."""
import math
from collections import Counter


def chi_square(a, b):
    """Two-sample chi-square statistic and degrees of freedom over the union of categories."""
    ca, cb = Counter(a), Counter(b)
    na, nb = len(a), len(b)
    stat = 0.0
    for k in set(ca) | set(cb):
        x, y = ca[k], cb[k]
        stat += (x * math.sqrt(nb / na) - y * math.sqrt(na / nb)) ** 2 / (x + y)
    return stat, max(1, len(set(ca) | set(cb)) - 1)


def critical(df, z=3.719):
    """The chi-square quantile at p = 1e-4 (z), by Wilson and Hilferty's approximation."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3
