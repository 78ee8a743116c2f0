"""Pure statistics for benchmark samples: median, Student's t interval, Welch's difference.

No numpy, no scipy, no torch: `effbench report` and `effbench compare` run on any Python.

    summarize([412.0, 398.5, 405.1])      -> Summary(n=3, median=405.1, mean=..., ci_low=..., ci_high=...)
    difference(a_samples, b_samples)      -> Difference(delta=..., ci_low=..., ci_high=..., significant=...)

The interval is the 95% Student's t interval of the *mean*; the *median* is reported beside it
because one slow window (a page fault, a noisy neighbour) moves it least. Samples from windows of
one run are not fully independent (caches, clocks and the neighbours drift together), so the
interval is a lower bound on the true uncertainty: treat "within noise" as the stronger statement.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from effbench import schema

CONFIDENCE = 0.95


def mean(xs: Sequence[float]) -> float:
    if not xs:
        raise ValueError("mean of no samples")
    return math.fsum(xs) / len(xs)


def median(xs: Sequence[float]) -> float:
    if not xs:
        raise ValueError("median of no samples")
    s = sorted(xs)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def stdev(xs: Sequence[float]) -> float:
    """Sample standard deviation (n - 1 in the denominator); 0 for fewer than two samples."""
    if len(xs) < 2:
        return 0.0
    m = mean(xs)
    return math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1))


# --- Student's t distribution ---------------------------------------------------------------------
def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta (modified Lentz; Numerical Recipes 6.4)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(ln_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom (df may be fractional: Welch)."""
    if df <= 0:
        raise ValueError("degrees of freedom must be positive")
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_pdf(t: float, df: float) -> float:
    """Student's t density with `df` degrees of freedom."""
    log_norm = math.lgamma((df + 1.0) / 2.0) - math.lgamma(df / 2.0) - 0.5 * math.log(df * math.pi)
    return math.exp(log_norm - (df + 1.0) / 2.0 * math.log1p(t * t / df))


def t_ppf(p: float, df: float) -> float:
    """The t quantile: t with P(T <= t) = p, to 1e-12 relative. Newton's steps on t_cdf (its derivative is
    t_pdf) from the Cornish-Fisher start: 3 evaluations of t_cdf at df >= 3 (a leaderboard computes one per row:
    a Welch interval, fractional df); below that, or should Newton stall, inside a bracket that bisection keeps."""
    if not 0.0 < p < 1.0:
        raise ValueError("p must be in (0, 1)")
    if p == 0.5:
        return 0.0
    if df >= 3.0:
        t = _cornish_fisher(p, df)
        for _ in range(8):
            density = t_pdf(t, df)
            if not density > 0.0:
                break
            step = (t_cdf(t, df) - p) / density
            t -= step
            if abs(step) < 1e-12 * max(1.0, abs(t)):
                return t
    return _t_ppf_bracketed(p, df)


def _cornish_fisher(p: float, df: float) -> float:
    """t quantile from the normal one, to 1e-4 or better at df >= 3 (Abramowitz & Stegun 26.7.5)."""
    z = NormalDist().inv_cdf(p)
    z2 = z * z
    g1 = (z2 + 1.0) * z / 4.0
    g2 = ((5.0 * z2 + 16.0) * z2 + 3.0) * z / 96.0
    g3 = (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) * z / 384.0
    g4 = ((((79.0 * z2 + 776.0) * z2 + 1482.0) * z2 - 1920.0) * z2 - 945.0) * z / 92160.0
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


def _t_ppf_bracketed(p: float, df: float) -> float:
    """t_ppf for any df: Newton inside a bracket, bisecting whenever a step would leave it."""
    lo, hi = -1.0, 1.0
    while t_cdf(lo, df) > p:
        lo *= 2.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    t = (lo + hi) / 2.0
    for _ in range(200):
        err = t_cdf(t, df) - p
        if err < 0:
            lo = t
        else:
            hi = t
        density = t_pdf(t, df)
        step = t - err / density if density > 0 else (lo + hi) / 2.0
        nxt = step if lo < step < hi else (lo + hi) / 2.0  # a step out of the bracket: bisect instead
        if abs(nxt - t) < 1e-12 * max(1.0, abs(t)) or hi - lo < 1e-12 * max(1.0, abs(t)):
            return nxt
        t = nxt
    return t


# --- summaries ------------------------------------------------------------------------------------
# Below 3 samples the 95% t quantile is 12.7 (df = 1): the interval spans about 18 sample standard
# deviations and says nothing a reader can use, so it is not printed; the summary says why instead.
MIN_SAMPLES_FOR_CI = 3


@dataclass(frozen=True)
class Summary:
    """Samples of one metric: their count, centre and the 95% t interval of the mean.

    The interval is None below MIN_SAMPLES_FOR_CI samples, and `note` says why.
    """

    n: int
    median: float
    mean: float
    stdev: float
    ci_low: float | None
    ci_high: float | None
    note: str | None = None

    @property
    def half_width(self) -> float | None:
        return None if self.ci_low is None or self.ci_high is None else (self.ci_high - self.ci_low) / 2

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_stat(cls, s: schema.Stat) -> Summary:
        """A summary as results.json recorded it (the throughput windows' `summary`)."""
        if s.n is None or s.median is None or s.mean is None or s.stdev is None:
            raise ValueError(f"a recorded summary lacks n, median, mean or stdev: {s!r}")
        # note: absent in records written before it existed
        return cls(n=s.n, median=s.median, mean=s.mean, stdev=s.stdev, ci_low=s.ci_low, ci_high=s.ci_high, note=s.note)


def too_few_note(n: int, fix: str = "raise --repeats") -> str:
    """Why there is no interval, and `fix`: what gives one (windows.more_windows_fix for throughput windows)."""
    return f"{n} sample(s): too few for a 95% interval (needs {MIN_SAMPLES_FOR_CI}; {fix})"


def too_few_to_judge(*counts: int, samples: str = "windows") -> str | None:
    """Why windows this few cannot be compared, else None. Below MIN_SAMPLES_FOR_CI windows the run
    report prints no interval for a run; a comparison of such runs (`compare`, a sweep's verdicts, the
    leaderboard, the CI gate) rests on the same too-wide t quantile, so it calls nothing noise or change.
    `samples="rounds"`: a configuration's runs over a sweep's --rounds, each one sample; `samples="runs"`: a
    machine's runs of one configuration (the leaderboard)."""
    n = min(counts)
    if n >= MIN_SAMPLES_FOR_CI:
        return None
    per = {"windows": "run", "rounds": "configuration", "runs": "machine"}[samples]
    return f"too few {samples} to judge (needs {MIN_SAMPLES_FOR_CI} per {per}, has {n})"


def summarize(
    xs: Sequence[float],
    confidence: float = CONFIDENCE,
    *,
    lower: float | None = None,
    upper: float | None = None,
    too_few_fix: str = "raise --repeats",
) -> Summary:
    """Median, mean, sample stdev and the Student's t interval of the mean, kept inside [lower, upper].

    `lower` / `upper` are the quantity's own range (0 for a throughput, 1 for a share). The mean of such a
    quantity cannot leave it, so intersecting the interval with the range keeps its coverage and never
    prints an impossible bound (a negative throughput). `too_few_fix` ends the note of a summary without one.
    """
    xs = [float(x) for x in xs]
    if not xs:
        raise ValueError("no samples to summarize")
    m, s = mean(xs), stdev(xs)
    if len(xs) < MIN_SAMPLES_FOR_CI:
        return Summary(len(xs), median(xs), m, s, None, None, too_few_note(len(xs), too_few_fix))
    h = t_ppf(0.5 + confidence / 2, len(xs) - 1) * s / math.sqrt(len(xs))
    lo, hi = m - h, m + h
    if lower is not None:
        lo = max(lo, lower)
    if upper is not None:
        hi = min(hi, upper)
    return Summary(len(xs), median(xs), m, s, lo, hi)


@dataclass(frozen=True)
class Difference:
    """b - a for two sets of samples, with Welch's t interval (unequal variances)."""

    delta: float
    """mean(b) - mean(a)."""
    relative: float | None
    """delta / mean(a); None when mean(a) is 0."""
    ci_low: float | None
    ci_high: float | None
    df: float | None
    significant: bool | None
    """True when the interval excludes 0; None when either side has fewer than two samples."""


def difference(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE) -> Difference:
    """Welch's interval for mean(b) - mean(a). Identical sample sets give delta 0, not significant."""
    a, b = [float(x) for x in a], [float(x) for x in b]
    if not a or not b:
        raise ValueError("both sides need samples")
    ma, mb = mean(a), mean(b)
    delta = mb - ma
    rel = delta / ma if ma else None
    if len(a) < 2 or len(b) < 2:
        return Difference(delta, rel, None, None, None, None)
    va, vb = stdev(a) ** 2 / len(a), stdev(b) ** 2 / len(b)
    se2 = va + vb
    if se2 == 0.0:  # no spread at all: only an exact tie is "no difference"
        return Difference(delta, rel, delta, delta, float("inf"), delta != 0.0)
    # Welch-Satterthwaite degrees of freedom
    df = se2**2 / ((va**2 / (len(a) - 1) if va else 0.0) + (vb**2 / (len(b) - 1) if vb else 0.0))
    h = t_ppf(0.5 + confidence / 2, df) * math.sqrt(se2)
    lo, hi = delta - h, delta + h
    return Difference(delta, rel, lo, hi, df, not (lo <= 0.0 <= hi))


def signed_rank_interval(xs: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float] | None:
    """(Hodges-Lehmann estimate, low, high): the centre of a symmetric distribution from its samples, and
    the Wilcoxon signed-rank interval around it.

    The estimate is the median of the n(n+1)/2 Walsh averages (x_i + x_j) / 2, i <= j; the interval runs
    from the (k+1)-th smallest to the (k+1)-th largest of them, with k the largest count whose lower tail
    under the exact signed-rank distribution holds at most (1 - confidence) / 2. It assumes independent
    samples symmetric about the centre (paired differences are), is as tight as Student's t on normal
    data (95% efficiency) and, unlike it, barely moves for a few wild samples. None for n < 6 at 95%.
    """
    s = [float(x) for x in xs]
    n = len(s)
    # counts[w]: how many of the 2^n sign patterns give signed-rank statistic w (subset sums of 1..n)
    counts = [1] + [0] * (n * (n + 1) // 2)
    for r in range(1, n + 1):
        for w in range(len(counts) - 1, r - 1, -1):
            counts[w] += counts[w - r]
    alpha, total = 1 - confidence, 2**n
    k, tail = 0, counts[0]
    if 2 * tail > alpha * total:
        return None
    while 2 * (tail + counts[k + 1]) <= alpha * total:
        k += 1
        tail += counts[k]
    # k: the critical value; the k smallest and k largest Walsh averages lie outside the interval
    walsh = sorted((s[i] + s[j]) / 2 for i in range(n) for j in range(i, n))
    return median(walsh), walsh[k], walsh[-k - 1]


def window_bounds(n: int, k: int) -> list[tuple[int, int]]:
    """Split n items into k contiguous windows as equal as possible (the first n % k get one more).
    Fewer items than windows: one window per item."""
    if n <= 0 or k <= 0:
        return []
    k = min(k, n)
    size, extra = divmod(n, k)
    bounds, start = [], 0
    for i in range(k):
        end = start + size + (1 if i < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds
