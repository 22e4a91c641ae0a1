"""Generation settings and the named profiles of the command line.

`ci` is sized to finish within about two minutes on two cores against `fast` (2,000 programs, every
16th also run captured; its 200 s of generation are a bound for slow hosts); `full` runs up to
20,000 examples with at most 12 minutes of generation, so a run stays under 15 minutes on two cores
(fewer programs on a slow host); `mpi` is the slice run under mpiexec
(conformance/mpi_driver.py): sharded programs (besides the rare symbolic ones), about two minutes
for 400 (over 300 of them sharded) on three ranks sharing two cores. Device kinds are parameters:
every strategy names devices through `GenConfig.single_devices()` and `GenConfig.shard_devices(n)`,
so a new kind joins by name (`--devices CLANG,LLVM`).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class GenConfig:
    kinds: tuple[str, ...] = ("CLANG",)
    max_ops: int = 6
    max_devices: int = 4
    max_elements: int = 256
    p_invalid: float = 0.12
    p_multi: float = 0.3
    p_big: float = 0.02
    p_ring_big: float = 0.002
    captured_every: int = 0  # every N-th random program also runs captured, twice (conformance/captured.py)
    p_large: float = 0.02  # a ~1M-element op (threads) or a 32,768+ one (strategies/optimized.py act_large)
    p_ring2: float = 0.25
    p_symbolic: float = 0.06
    disk_dir: str | None = None
    cuda_archs: tuple[str, ...] = ()  # compile every kernel for CUDA too (conformance/cuda_compile.py)

    kind_limits: tuple[tuple[str, int], ...] = ()  # (kind, devices) for kinds with fewer than max_devices

    def count(self, kind: str) -> int:
        """How many devices of `kind` programs use: max_devices unless `kind_limits` says fewer
        (`--devices CUDA=1,CLANG` on a machine with one GPU)."""
        return min(self.max_devices, dict(self.kind_limits).get(kind, self.max_devices))

    def single_devices(self) -> tuple[str, ...]:
        """Compute devices a single buffer may live on: every kind, indices 0..count(kind)-1."""
        return tuple(self.device(kind, i) for kind in self.kinds for i in range(self.count(kind)))

    @staticmethod
    def device(kind: str, index: int) -> str:
        return kind if index == 0 else f"{kind}:{index}"

    def shard_devices(self, count: int, kind: str | None = None) -> tuple[str, ...]:
        """`count` devices of `kind` (default the first kind); of the first kind that has that
        many when `kind` has fewer (a sharded program then runs on the CPU kinds)."""
        kinds = [kind or self.kinds[0], *self.kinds]
        chosen = next((k for k in kinds if self.count(k) >= count), kinds[0])
        return tuple(self.device(chosen, i) for i in range(count))


@dataclass(frozen=True)
class Profile:
    name: str
    examples: int
    gen: GenConfig = field(default_factory=GenConfig)
    shrink_seconds: float = 20.0
    time_limit: float = 270.0  # seconds of generation per run (all workers in parallel)


PROFILES = {
    "ci": Profile("ci", examples=2000, gen=GenConfig(max_ops=6, captured_every=16, p_large=0.04), shrink_seconds=15.0,
                  time_limit=200.0),
    "mpi": Profile("mpi", examples=400, gen=GenConfig(max_ops=6, p_multi=1.0, p_symbolic=0.03),
                   shrink_seconds=15.0, time_limit=150.0),
    "full": Profile("full", examples=20_000,
                    gen=GenConfig(max_ops=8, p_big=0.02, p_ring_big=0.002, captured_every=4),
                    shrink_seconds=45.0, time_limit=720.0),
}
